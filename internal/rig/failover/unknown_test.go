package failover

import (
	"context"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A completion whose commit returns an error has an unknown outcome: the
// primary may have committed it or not, and its standby may have it or
// not. With synchronous replication the commit waits for the standby;
// halting the standby holds it there, and the test ends the wait by the
// caller's deadline. Whichever way it went, writing the same completion
// again on the new primary settles it: accepted when the completion was
// lost with the old primary, recorded (lease.VerdictRecorded: no error,
// not a stale rejection) when it had reached the standby.
func TestCompletionWithUnknownOutcomeIsSettledOnTheNewPrimary(t *testing.T) {
	for _, reached := range []bool{true, false} {
		name := "lost with the old primary"
		if reached {
			name = "reached the standby"
		}
		t.Run(name, func(t *testing.T) {
			pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
				ctx := context.Background()
				p := newPair(t, true)
				s := openStore(t, drv, dsn(drv, "unknown", p.primary, p.standby), pgtest.SchemaName(), true)
				_, err := pgtest.EnqueueCommitted(ctx, s, lease.Event{Kind: "k", EventID: "e"})
				must(t, "enqueue", err)
				claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Worker: "A"})
				if err != nil || len(claims) != 1 {
					t.Fatalf("claim = %v, %v; want one", claims, err)
				}
				ref := claims[0].Ref()

				// The commit waits for the halted standby until the deadline.
				must(t, "halt the standby", p.standby.Halt())
				waitCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				first, err := s.WriteMany(waitCtx, lease.Complete(ref))
				cancel()
				must(t, "the completion", err)
				if first[0].Verdict != lease.VerdictNoAnswer {
					t.Fatalf("the completion while its commit waited for a halted synchronous standby: %+v; want no answer", first[0])
				}
				t.Logf("the completion's error: %v (%s)", first[0].Err, leasework.Classify(drv, first[0].Err))

				if reached {
					// The standby comes back and receives the commit.
					must(t, "start the standby again", p.standby.Start(ctx))
					must(t, "wait for the standby to catch up", p.primary.CaughtUp(ctx))
				}
				must(t, "crash the primary", p.primary.Crash())
				if !reached {
					must(t, "start the standby again", p.standby.Start(ctx))
				}
				p.promote(t)

				var res []lease.Result
				err = retryConn(t, drv, "the completion again", func() (err error) {
					res, err = s.WriteMany(ctx, lease.Complete(ref))
					if err == nil && res[0].Verdict == lease.VerdictNoAnswer {
						return res[0].Err // the statement failed: a lost connection is tried again
					}
					return err
				})
				if err != nil || len(res) != 1 {
					t.Fatalf("the completion again, on the new primary: %v, %v", res, err)
				}
				want := lease.VerdictAccepted
				if reached {
					want = lease.VerdictRecorded
				}
				if res[0].Verdict != want || res[0].Err != nil || res[0].Status != leasework.StatusDone {
					t.Errorf("the completion again: %+v; want %s, DONE", res[0], want)
				}
				var r lease.Row
				must(t, "read the row on the new primary", retryConn(t, drv, "get", func() (err error) {
					r, err = s.Get(ctx, ref.ID)
					return err
				}))
				if r.Status != leasework.StatusDone || r.Generation != ref.Generation {
					t.Errorf("row on the new primary: %s at generation %d; want DONE at %d", r.Status, r.Generation, ref.Generation)
				}
			})
		})
	}
}
