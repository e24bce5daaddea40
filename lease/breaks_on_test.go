//go:build leasework_break

package lease

import (
	"strings"
	"testing"
)

// TestBreaksApply renders the statements under each of the store's
// deliberate breaks: a statement changed so that a break no longer finds
// what it rewrites makes it panic, and the soak against it would prove
// nothing.
func TestBreaksApply(t *testing.T) {
	clean, err := namesOnly(Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := clean.renderQueries()
	for _, name := range []string{"steal-leases", "claim-waiting", "cancel-releases", "cancel-finished", "snooze-spends", "retry-doubled", "pause-ignored", "limit-off-by-one", "limit-ignores-holder-lease", "limit-handoff-doubled", "partition-off-by-one", "rate-window-short", "partition-rate-window-short", "steps-not-handed", "step-unguarded"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("LEASEWORK_BREAK", name)
			s, err := namesOnly(Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.renderQueries(); got == want {
				t.Errorf("break %s changed no statement", name)
			}
		})
	}
}

// TestMigrationBreaksApply renders the migrations under each of their
// deliberate breaks.
func TestMigrationBreaksApply(t *testing.T) {
	sqlOf := func() string {
		var b strings.Builder
		for _, m := range Migrations() {
			b.WriteString(m.sql)
		}
		return b.String()
	}
	want := sqlOf()
	for _, name := range []string{"keys-listed-reversed", "fair-no-arrivals"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("LEASEWORK_BREAK", name)
			if sqlOf() == want {
				t.Errorf("break %s changed no migration", name)
			}
		})
	}
}
