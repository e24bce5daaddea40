package framework

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// In the worst case the configuration allows (RenewEvery = Lease/2), every
// claim's renewal is sent at most RenewEvery after its last confirmation,
// wherever the claim falls between two ticks of the renewal loop: a
// renewal never leaves so late that only a fast answer beats the watchdog at
// 0.9 × Lease. The decision is tested on the schedule itself, with the
// loop's ticks simulated, so the machine's speed plays no part.
func TestRenewalIsSentWithinRenewEvery(t *testing.T) {
	cfg, err := Config{Lease: 3 * time.Second, RenewEvery: 1500 * time.Millisecond}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: cfg}
	tick := w.renewTick()
	tick0 := time.Unix(1_000_000, 0) // a tick of the renewal loop
	for step := range 1000 {
		offset := time.Duration(step) * tick / 1000
		a := &attempt{w: w, ref: leasework.Ref{ID: 1, Generation: 1}, ctx: context.Background(), confirmed: tick0.Add(offset)}
		w.live = map[leasework.Ref]*attempt{a.ref: a}
		renewedAt := time.Duration(-1)
		for k := 1; k <= 10 && renewedAt < 0; k++ {
			now := tick0.Add(time.Duration(k) * tick)
			if len(w.dueForRenewal(now)) == 1 {
				renewedAt = now.Sub(a.confirmed)
			}
		}
		if renewedAt < 0 || renewedAt > cfg.RenewEvery {
			t.Fatalf("claim confirmed %v after a tick (ticks every %v): first renewed at age %v; want at most RenewEvery (%v), leaving %v before the watchdog",
				offset, tick, renewedAt, cfg.RenewEvery, cfg.Lease-cfg.margin()-cfg.RenewEvery)
		}
	}
}

// A claim whose handler's context ended without the handler returning is
// not renewed; one whose handler returned is renewed until its outcome is
// written (or given up), however long after its return.
func TestRenewalSkipsHandlersWhoseContextEnded(t *testing.T) {
	cfg, err := Config{Lease: time.Second}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: cfg}
	now := time.Unix(1_000_000, 0)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		a    *attempt
		want bool
	}{
		{"running", &attempt{ctx: context.Background()}, true},
		{"cancelled, still running", &attempt{ctx: ended}, false},
		{"returned, outcome pending", &attempt{ctx: ended, ended: true, endedAt: now.Add(-cfg.Lease / 2)}, true},
		{"returned leases ago, outcome pending", &attempt{ctx: ended, ended: true, endedAt: now.Add(-3 * cfg.Lease)}, true},
		{"refused by the database", &attempt{ctx: context.Background(), stale: true}, false},
		{"returned after it was counted hung", &attempt{ctx: ended, ended: true, endedAt: now, hung: true}, false},
	} {
		c.a.w = w
		if got := c.a.renewable(); got != c.want {
			t.Errorf("%s: renewable = %v; want %v", c.name, got, c.want)
		}
	}
}
