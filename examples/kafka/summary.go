package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/lease"
)

// summarize prints the run's figures and checks them: every event DONE,
// published at least once, applied exactly once.
func summarize(ctx context.Context, p *printer, ids []string, rows []lease.Row, published int64,
	cc consumerCounts, wc framework.Counters, l *ledger, customers int) error {
	gens := map[int64]int{}
	for _, r := range rows {
		gens[r.Generation]++
	}
	var byGen []string
	for _, g := range slices.Sorted(maps.Keys(gens)) {
		byGen = append(byGen, fmt.Sprintf("%d at generation %d", gens[g], g))
	}
	p.printf("")
	p.printf("summary")
	p.printf("  orders placed, events in the outbox: %d", len(ids))
	p.printf("  outbox rows DONE:                     %d (%s)", countDone(rows), strings.Join(byGen, ", "))
	p.printf("  records acknowledged by the broker:   %d", published)
	p.printf("  records consumed:                     %d", cc.Consumed)
	p.printf("  effects applied:                      %d", cc.Applied)
	p.printf("  duplicates skipped by the inbox:      %d", cc.Duplicates)
	p.printf("  applied out of a customer's order:    %d", cc.OutOfOrder)
	p.printf("  worker: claimed %d, completed %d, retried %d, stale rejections %d",
		wc.Claimed, wc.Completed, wc.Retried, wc.StaleRejections)
	for i := range customers {
		t, err := l.totalFor(ctx, fmt.Sprintf("customer-%d", i+1))
		if err != nil {
			return err
		}
		p.printf("  ledger: %s has orders=%d total=%s last=#%d", t.Customer, t.Orders, money(t.AmountCents), t.LastSeq)
	}
	if cc.Applied < int64(len(ids)) || published < int64(len(ids)) {
		return errors.New("fewer events published or applied than placed")
	}
	if cc.OutOfOrder > 0 {
		return fmt.Errorf("%d orders applied out of their customer's order", cc.OutOfOrder)
	}
	return nil
}

func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// printer writes whole lines from many goroutines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}
