package leaseworkotel

import (
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/leasework/leasework/framework"
)

// OutcomesCounted reports the outcomes the observer has a counter for.
func OutcomesCounted() (map[framework.Outcome]bool, error) {
	ins, err := newInstruments(noop.NewMeterProvider().Meter("test"))
	if err != nil {
		return nil, err
	}
	out := map[framework.Outcome]bool{}
	for o, c := range ins.outcomes {
		out[o] = c != nil
	}
	return out, nil
}
