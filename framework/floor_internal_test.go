package framework

import (
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// TestFloorsFollowTheClaims walks a queue's floors through the claims of
// its loop and its sweeps: none before the first claim, each level's
// floor floorSlack before the latest due time claimed at it, never lowered
// by a floored claim of an older row but set back by a sweep that took
// one, nothing learned from a reclaimed row, a sweep due once fullEvery
// has passed (or fullShare times the last one's duration) and never two
// at once, and no floors after a failed claim or a claim that shows the
// database clock behind a floor.
func TestFloorsFollowTheClaims(t *testing.T) {
	const leaseFor = time.Minute
	t0 := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // the database clock
	local := time.Now()                                // the worker's
	claim := func(priority int, due time.Time, reclaimed bool) leasework.Claim {
		return leasework.Claim{Priority: priority, DueAt: due, Reclaimed: reclaimed, LeaseUntil: t0.Add(leaseFor)}
	}
	var f floors
	if from, _, full := f.next(); from != nil || !full {
		t.Fatalf("before any claim: floors %v, full %v; want none, a claim from the oldest", from, full)
	}
	if f.sweepDue(local.Add(time.Hour)) {
		t.Fatal("before any claim: a sweep is due; want none (the loop's claims read from the oldest)")
	}
	f.claimed([]leasework.Claim{claim(0, t0.Add(-3*time.Second), false), claim(0, t0.Add(-5*time.Second), false),
		claim(2, t0.Add(-time.Second), false), claim(1, t0.Add(-time.Hour), true)}, false, nil, true, 10, leaseFor, time.Millisecond, local)
	from, _, full := f.next()
	if from == nil || full {
		t.Fatal("after a claim: no floors")
	}
	if want := t0.Add(-3*time.Second - floorSlack); !from[0].Equal(want) {
		t.Errorf("level 0's floor %v; want %v (the latest due time claimed, less floorSlack)", from[0], want)
	}
	if want := t0.Add(-time.Second - floorSlack); !from[2].Equal(want) {
		t.Errorf("level 2's floor %v; want %v", from[2], want)
	}
	if !from[1].IsZero() {
		t.Errorf("level 1's floor %v; want none (its only row was reclaimed: its due time says nothing of the READY rows)", from[1])
	}
	f.claimed([]leasework.Claim{claim(0, t0.Add(-time.Minute), false)}, false, nil, false, 10, leaseFor, time.Millisecond, local)
	if want := t0.Add(-3*time.Second - floorSlack); !f.from[0].Equal(want) {
		t.Errorf("level 0's floor after a claim of an older row: %v; want it kept at %v", f.from[0], want)
	}
	if f.sweepDue(local.Add(fullEvery / 2)) {
		t.Errorf("fullEvery/2 after the first claim: a sweep is due; want none yet")
	}
	if !f.sweepDue(local.Add(fullEvery)) {
		t.Errorf("fullEvery after the first claim: no sweep due; want one")
	}
	if f.sweepDue(local.Add(fullEvery)) {
		t.Errorf("a second sweep is due while the first is in flight; want one at a time")
	}
	// That sweep finds rows a long transaction committed late, due before
	// the floor: the floor goes back to them, for the rest behind them.
	f.claimed([]leasework.Claim{claim(0, t0.Add(-time.Minute), false)}, false, nil, true, 10, leaseFor, time.Millisecond, local.Add(fullEvery))
	if want := t0.Add(-time.Minute - floorSlack); !f.from[0].Equal(want) {
		t.Errorf("level 0's floor after a sweep took a row due a minute ago: %v; want %v", f.from[0], want)
	}
	if want := t0.Add(-time.Second - floorSlack); !f.from[2].Equal(want) {
		t.Errorf("level 2's floor after a sweep took none of its rows: %v; want it kept at %v", f.from[2], want)
	}
	// A slow sweep spaces the next one out.
	f.claimed(nil, false, nil, true, 10, leaseFor, time.Second, local)
	if f.sweepDue(local.Add(fullShare*time.Second - time.Millisecond)) {
		t.Errorf("just under %d× a 1s sweep after it: a sweep is due; want none yet", fullShare)
	}
	if !f.sweepDue(local.Add(fullShare * time.Second)) {
		t.Errorf("%d× a 1s sweep after it: no sweep due; want one", fullShare)
	}
	f.sweepSkipped()
	f.claimed(nil, false, errors.New("connection lost"), false, 10, leaseFor, time.Millisecond, local)
	if from, _, full := f.next(); from != nil || !full {
		t.Errorf("after a failed claim: floors %v; want none", from)
	}
	f.claimed([]leasework.Claim{claim(0, t0, false)}, false, nil, true, 10, leaseFor, time.Millisecond, local)
	behind := claim(3, t0.Add(-time.Hour), false)
	behind.LeaseUntil = t0.Add(-time.Hour + leaseFor) // the claim ran an hour before the floor
	f.claimed([]leasework.Claim{behind}, false, nil, false, 10, leaseFor, time.Millisecond, local)
	if from, _, full := f.next(); from != nil || !full {
		t.Errorf("after a claim that shows the database clock an hour behind: floors %v; want none", from)
	}
}

// TestLeaseFloorFollowsTheClaims walks the expired leases' floor: raised
// to floorSlack before the clock of a claim that took fewer expired leases
// than it could, kept by a claim that took as many as it could, back to
// the oldest after a sweep that did, and never lowered by a claim that
// returned nothing (its clock is unknown).
func TestLeaseFloorFollowsTheClaims(t *testing.T) {
	const leaseFor = time.Minute
	t0 := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	local := time.Now()
	at := func(clock time.Time, reclaimed bool) leasework.Claim {
		return leasework.Claim{DueAt: clock.Add(-time.Second), Reclaimed: reclaimed, LeaseUntil: clock.Add(leaseFor)}
	}
	var f floors
	f.claimed([]leasework.Claim{at(t0, true), at(t0, false)}, false, nil, true, 10, leaseFor, time.Millisecond, local)
	if _, leaseFrom, _ := f.next(); !leaseFrom.Equal(t0.Add(-floorSlack)) {
		t.Fatalf("after a claim that took 1 expired lease of 10 it could: lease floor %v; want %v", leaseFrom, t0.Add(-floorSlack))
	}
	t1 := t0.Add(time.Minute)
	full := []leasework.Claim{at(t1, true), at(t1, true)}
	f.claimed(full, false, nil, false, 2, leaseFor, time.Millisecond, local)
	if _, leaseFrom, _ := f.next(); !leaseFrom.Equal(t0.Add(-floorSlack)) {
		t.Errorf("after a floored claim that took as many expired leases as it could: lease floor %v; want it kept at %v", leaseFrom, t0.Add(-floorSlack))
	}
	f.claimed(nil, false, nil, false, 10, leaseFor, time.Millisecond, local)
	if _, leaseFrom, _ := f.next(); !leaseFrom.Equal(t0.Add(-floorSlack)) {
		t.Errorf("after a claim that returned nothing: lease floor %v; want it kept at %v", leaseFrom, t0.Add(-floorSlack))
	}
	f.claimed([]leasework.Claim{at(t1, false)}, false, nil, false, 10, leaseFor, time.Millisecond, local)
	if _, leaseFrom, _ := f.next(); !leaseFrom.Equal(t1.Add(-floorSlack)) {
		t.Errorf("after a claim at t0+1m that took no expired lease: lease floor %v; want %v", leaseFrom, t1.Add(-floorSlack))
	}
	f.claimed(full, false, nil, true, 2, leaseFor, time.Millisecond, local)
	if _, leaseFrom, _ := f.next(); !leaseFrom.IsZero() {
		t.Errorf("after a sweep that took as many expired leases as it could: lease floor %v; want none (more may be before it)", leaseFrom)
	}
}

// A claim that a concurrency limit held back may have skipped READY rows
// due before those it took, and expired leases older than those it took
// back: it moves no floor, up or down.
func TestHeldBackClaimMovesNoFloor(t *testing.T) {
	const leaseFor = time.Minute
	t0 := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	local := time.Now()
	claim := func(due time.Time, reclaimed bool) leasework.Claim {
		return leasework.Claim{DueAt: due, Reclaimed: reclaimed, LeaseUntil: t0.Add(leaseFor)}
	}
	var f floors
	f.claimed([]leasework.Claim{claim(t0.Add(-time.Hour), false)}, false, nil, true, 10, leaseFor, time.Millisecond, local)
	from, leaseFrom, _ := f.next()
	f.claimed([]leasework.Claim{claim(t0.Add(-time.Second), false), claim(t0, true)}, true, nil, false, 10, leaseFor, time.Millisecond, local)
	after, leaseAfter, full := f.next()
	if full || !after[0].Equal(from[0]) || !leaseAfter.Equal(leaseFrom) {
		t.Errorf("after a held-back claim: floors %v, lease floor %v, full %v; want them as they were: %v, %v",
			after[0], leaseAfter, full, from[0], leaseFrom)
	}
	f.claimed([]leasework.Claim{claim(t0.Add(-time.Second), false)}, false, nil, false, 10, leaseFor, time.Millisecond, local)
	if after, _, _ := f.next(); !after[0].Equal(t0.Add(-time.Second - floorSlack)) {
		t.Errorf("after a claim not held back: level 0's floor %v; want it raised to %v", after[0], t0.Add(-time.Second-floorSlack))
	}
}
