package framework

import (
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
)

// TestFloorsFollowTheClaims walks a queue's floors through the claims of
// its loop: none before the first claim, each level's floor floorSlack
// before the latest due time claimed at it, never lowered by a floored
// claim of an older row but set back by a claim from the oldest that took
// one, nothing learned from a reclaimed row, a claim from the oldest once
// fullEvery has passed (or fullShare times the last one's duration), and
// no floors after a failed claim or a claim that shows the database clock
// behind a floor.
func TestFloorsFollowTheClaims(t *testing.T) {
	const leaseFor = time.Minute
	t0 := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // the database clock
	local := time.Now()                                // the worker's
	claim := func(priority int, due time.Time, reclaimed bool) leasework.Claim {
		return leasework.Claim{Priority: priority, DueAt: due, Reclaimed: reclaimed, LeaseUntil: t0.Add(leaseFor)}
	}
	var f floors
	if from := f.next(local); from != nil {
		t.Fatalf("before any claim: floors %v; want none", from)
	}
	f.claimed([]leasework.Claim{claim(0, t0.Add(-3*time.Second), false), claim(0, t0.Add(-5*time.Second), false),
		claim(2, t0.Add(-time.Second), false), claim(1, t0.Add(-time.Hour), true)}, nil, true, leaseFor, time.Millisecond, local)
	from := f.next(local.Add(fullEvery / 2))
	if from == nil {
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
	f.claimed([]leasework.Claim{claim(0, t0.Add(-time.Minute), false)}, nil, false, leaseFor, time.Millisecond, local)
	if want := t0.Add(-3*time.Second - floorSlack); !f.from[0].Equal(want) {
		t.Errorf("level 0's floor after a claim of an older row: %v; want it kept at %v", f.from[0], want)
	}
	if from := f.next(local.Add(fullEvery)); from != nil {
		t.Errorf("fullEvery after the first claim: floors %v; want a claim from the oldest", from)
	}
	// That claim finds rows a long transaction committed late, due before
	// the floor: the floor goes back to them, for the rest behind them.
	f.claimed([]leasework.Claim{claim(0, t0.Add(-time.Minute), false)}, nil, true, leaseFor, time.Millisecond, local.Add(fullEvery))
	if want := t0.Add(-time.Minute - floorSlack); !f.from[0].Equal(want) {
		t.Errorf("level 0's floor after a claim from the oldest took a row due a minute ago: %v; want %v", f.from[0], want)
	}
	if want := t0.Add(-time.Second - floorSlack); !f.from[2].Equal(want) {
		t.Errorf("level 2's floor after a claim from the oldest took none of its rows: %v; want it kept at %v", f.from[2], want)
	}
	// A slow claim from the oldest spaces the next one out.
	f.claimed(nil, nil, true, leaseFor, time.Second, local)
	if from := f.next(local.Add(fullShare*time.Second - time.Millisecond)); from == nil {
		t.Errorf("just under %d× a 1s claim from the oldest after it: no floors; want them", fullShare)
	}
	if from := f.next(local.Add(fullShare * time.Second)); from != nil {
		t.Errorf("%d× a 1s claim from the oldest after it: floors %v; want none", fullShare, from)
	}
	f.claimed(nil, errors.New("connection lost"), false, leaseFor, time.Millisecond, local)
	if from := f.next(local); from != nil {
		t.Errorf("after a failed claim: floors %v; want none", from)
	}
	f.claimed([]leasework.Claim{claim(0, t0, false)}, nil, true, leaseFor, time.Millisecond, local)
	behind := claim(3, t0.Add(-time.Hour), false)
	behind.LeaseUntil = t0.Add(-time.Hour + leaseFor) // the claim ran an hour before the floor
	f.claimed([]leasework.Claim{behind}, nil, false, leaseFor, time.Millisecond, local)
	if from := f.next(local); from != nil {
		t.Errorf("after a claim that shows the database clock an hour behind: floors %v; want none", from)
	}
}
