package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A paused owner resumes late: worker A claims the event and stalls before
// publishing, past its lease (a fixture); worker B claims it again and
// publishes; then A resumes and publishes too. The topic holds both records;
// A's completion is rejected by the generation guard and counted as a stale
// rejection; the row ends as B left it; the consumer applies the event once.
func TestPausedOwnerResumesLate(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		e := newEnv(t, drv)
		o := order{ID: "1", Customer: "customer-3", AmountCents: 4200}
		row := e.place(o)

		// A stands for a process that stops dead (a GC pause, SIGSTOP, a
		// partition) after it claimed. Its handler blocks before publishing.
		// The rest of a paused process is stopped too: A has one handler
		// slot, so it claims nothing more while it stalls, and it renews
		// only every five minutes, far beyond the test, so nothing tells A
		// it lost the claim before it publishes.
		claimed := make(chan *leasework.Claim, 1)
		resume := make(chan struct{})
		relayA := &relay{client: e.producer(), topic: testTopic}
		stalled := leasework.HandlerFunc(func(ctx context.Context, c *leasework.Claim) error {
			claimed <- c
			select {
			case <-resume:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			return relayA.Handle(ctx, c)
		})
		a := e.worker("relay-a", stalled, framework.Config{Concurrency: 1, Lease: 10 * time.Minute, RenewEvery: 5 * time.Minute}, framework.RetryPolicy{})
		stopA := e.start(a)
		var claimA *leasework.Claim
		select {
		case claimA = <-claimed:
		case <-time.After(30 * time.Second):
			t.Fatal("worker A did not claim the event within 30s")
		}
		if claimA.ID != row.ID || claimA.Generation != 1 {
			t.Fatalf("A claimed row %d generation %d; want row %d generation 1", claimA.ID, claimA.Generation, row.ID)
		}

		// A's lease runs out while it stalls; B claims the event again and
		// publishes it.
		if err := leasetest.ExpireLease(e.ctx, e.store, row.ID); err != nil {
			t.Fatal(err)
		}
		b := e.worker("relay-b", &relay{client: e.producer(), topic: testTopic}, framework.Config{}, framework.RetryPolicy{})
		stopB := e.start(b)
		waitFor(t, "B to publish and complete the event", func() (bool, error) {
			return b.Counters().Completed == 1, nil
		})
		stopB()
		done := e.wantRow(o.eventID(), leasework.StatusDone, 2) // B's outcome

		// A resumes, publishes (the broker cannot know A is stale), and its
		// completion is rejected.
		close(resume)
		waitFor(t, "A's completion to be rejected", func() (bool, error) {
			return a.Counters().StaleRejections == 1, nil
		})
		stopA()
		if c := a.Counters(); c.Completed != 0 || c.LeasesLost != 0 {
			t.Fatalf("A: completed %d, leases lost %d; want 0 and 0 (A never learned of the loss before publishing)", c.Completed, c.LeasesLost)
		}
		if _, err := e.store.Write(e.ctx, lease.Complete(claimA.Ref())); !errors.Is(err, leasework.ErrLeaseLost) {
			t.Fatalf("completing A's claim (generation 1) again: %v; want ErrLeaseLost", err)
		}
		after := e.wantRow(o.eventID(), leasework.StatusDone, 2)
		if !after.UpdatedAt.Equal(done.UpdatedAt) || after.Attempt != done.Attempt {
			t.Fatalf("A's late outcome changed B's row: %+v, was %+v", after, done)
		}

		recs := e.records()
		if len(recs) != 2 {
			t.Fatalf("topic holds %d records: %+v; want 2", len(recs), recs)
		}
		// One key, one partition: B's record first, A's late one after it.
		for i, gen := range []int64{2, 1} {
			if r := recs[i]; r.EventID != o.eventID() || r.Generation != gen || r.Partition != recs[0].Partition {
				t.Fatalf("record %d: %+v; want %s generation %d in partition %d", i, r, o.eventID(), gen, recs[0].Partition)
			}
		}
		c := e.consume(len(recs))
		if c.Applied != 1 || c.Duplicates != 1 {
			t.Fatalf("consumer: %+v; want 1 applied and 1 duplicate skipped", c)
		}
		e.wantApplied(o)
	})
}
