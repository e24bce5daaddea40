package errprefix_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasework/leasework/internal/errprefix"
)

var errSentinel = errors.New("lease: no such event")

type typed struct{}

func (typed) Error() string { return "lease: typed" }

func TestTrim(t *testing.T) {
	err := fmt.Errorf("lease: get row 5: %w", errprefix.Trim("lease: ", errSentinel))
	if got, want := err.Error(), "lease: get row 5: no such event"; got != want {
		t.Errorf("message %q; want %q", got, want)
	}
	if !errors.Is(err, errSentinel) {
		t.Errorf("errors.Is(%v, the sentinel) = false", err)
	}
	var ty typed
	if !errors.As(fmt.Errorf("lease: op: %w", errprefix.Trim("lease: ", ty)), &ty) {
		t.Error("errors.As does not find the trimmed error")
	}
	if got := errprefix.Trim("lease: ", errors.New("pq: other")).Error(); got != "pq: other" {
		t.Errorf("another prefix: %q; want it unchanged", got)
	}
	if errprefix.Trim("lease: ", nil) != nil {
		t.Error("Trim of nil is not nil")
	}
}
