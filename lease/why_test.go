package lease_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// why reads the reasons row id is not running, failing the test on error.
func why(t *testing.T, s *lease.Store, id int64) []lease.Reason {
	t.Helper()
	rs, err := s.WhyNotRunning(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rs == nil {
		t.Fatalf("WhyNotRunning(%d) returned a nil list; want a list, empty when nothing holds the row", id)
	}
	return rs
}

// texts are the reasons' sentences.
func texts(rs []lease.Reason) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Text
	}
	return out
}

// wantNoReason fails the test unless nothing holds row id back.
func wantNoReason(t *testing.T, s *lease.Store, id int64, what string) {
	t.Helper()
	if rs := why(t, s, id); len(rs) != 0 {
		t.Errorf("%s: reasons %q; want none", what, texts(rs))
	}
}

// A due READY row is held by its kind's limit once the limit is full, and
// by its queue's as well, each named with its live attempts; not while
// the limit has room, nor once an attempt under it has ended. A running
// row has no reason.
func TestWhyALimitHoldsARow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 2})
		in := pgtest.EnqueueN(t, s, 3, "send-email")
		wantNoReason(t, s, in[2].ID, "a due row under a limit with room")

		claims, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2, Kinds: []string{"send-email"}})
		if len(claims) != 2 || claims[0].ID != in[0].ID || claims[1].ID != in[1].ID {
			t.Fatalf("claimed %+v; want the first two rows", claims)
		}
		wantNoReason(t, s, in[0].ID, "a running row")
		rs := why(t, s, in[2].ID)
		want := lease.Reason{Kind: lease.ReasonLimit, Limit: lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 2}, Live: 2,
			Text: "held by concurrency limit kind:send-email (2/2 live): it starts when one of those attempts ends, or the limit is raised or cleared"}
		if len(rs) != 1 || rs[0] != want {
			t.Fatalf("reasons of the third row = %+v; want %+v", rs, want)
		}

		// The queue held as well (a limit of 0): both reasons, kind first.
		setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 0})
		rs = why(t, s, in[2].ID)
		if len(rs) != 2 || rs[0] != want || rs[1].Kind != lease.ReasonLimit ||
			rs[1].Limit != (lease.Limit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 0}) || rs[1].Live != 0 ||
			rs[1].Text != "held by concurrency limit queue:default (0/0 live): the limit is 0, so none of its attempts starts until it is raised or cleared" {
			t.Fatalf("reasons under a full kind limit and a queue held = %q (%+v); want the kind's, then the queue's", texts(rs), rs)
		}
		if _, err := s.ClearLimit(context.Background(), lease.ScopeQueue, lease.DefaultQueue, "test"); err != nil {
			t.Fatal(err)
		}

		// Lowered below its live attempts: it says so.
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 1})
		rs = why(t, s, in[2].ID)
		if len(rs) != 1 || rs[0].Live != 2 || rs[0].Limit.Max != 1 ||
			rs[0].Text != "held by concurrency limit kind:send-email (2/1 live): the limit was lowered below the attempts that run; it starts once enough of them have ended, or the limit is raised or cleared" {
			t.Fatalf("reasons under a lowered limit = %q; want it held, 2/1 live", texts(rs))
		}
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "send-email", Max: 2})

		// One attempt ends: the limit has room, nothing holds the row.
		write(t, s, lease.Complete(claims[0].Ref()))
		wantNoReason(t, s, in[2].ID, "a due row once an attempt under its limit ended")
		wantNoReason(t, s, in[0].ID, "a DONE row")

		// A lease that ran out frees its place: nothing holds the row.
		more, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1, Kinds: []string{"send-email"}})
		if len(more) != 1 || more[0].ID != in[2].ID {
			t.Fatalf("claimed %+v; want the third row", more)
		}
		extra := pgtest.EnqueueN(t, s, 1, "send-email")
		if rs := why(t, s, extra[0].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonLimit {
			t.Fatalf("a row behind a full limit: reasons %q; want the limit", texts(rs))
		}
		if err := leasetest.ExpireLease(context.Background(), s, more[0].ID); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, extra[0].ID, "a due row whose limit's attempt's lease ran out")
		wantNoReason(t, s, more[0].ID, "an INPROGRESS row whose lease ran out, in a running queue")
	})
}

// A paused queue holds its READY rows, its WAITING rows and its rows whose
// lease ran out, but not its running ones; a row not yet due says when it
// comes due, by the database clock; reasons come in their documented
// order.
func TestWhyAPausedQueueAndAFutureRow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", Queue: "bulk"},
			lease.Event{Kind: "k", Queue: "bulk"},
			lease.Event{Kind: "k", Queue: "bulk", RunAt: time.Now().Add(time.Hour)},
			lease.Event{Kind: "k", RunAt: time.Now().Add(90 * time.Minute)},
		)
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "bulk"})
		if err != nil || len(claims) != 1 || claims[0].ID != in[0].ID {
			t.Fatalf("claim = %+v, %v; want the first row", claims, err)
		}
		if _, err := s.PauseQueue(ctx, "bulk"); err != nil {
			t.Fatal(err)
		}
		qs, err := s.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var paused time.Time
		for _, q := range qs {
			if q.Name == "bulk" {
				paused = q.Paused
			}
		}
		if paused.IsZero() {
			t.Fatalf("queues %+v: bulk not paused", qs)
		}
		pausedText := "queue bulk is paused (since " + paused.UTC().Format("2006-01-02 15:04:05Z") + "): none of its events is claimed until it is resumed"

		rs := why(t, s, in[1].ID)
		if len(rs) != 1 || rs[0] != (lease.Reason{Kind: lease.ReasonPaused, Queue: "bulk", PausedAt: rs[0].PausedAt, Text: pausedText}) || !rs[0].PausedAt.Equal(paused) {
			t.Fatalf("reasons of a due row of a paused queue = %+v; want %q", rs, pausedText)
		}
		wantNoReason(t, s, in[0].ID, "a running row of a paused queue")
		if err := leasetest.ExpireLease(ctx, s, in[0].ID); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, in[0].ID); len(rs) != 1 || rs[0].Text != pausedText {
			t.Errorf("reasons of a row of a paused queue whose lease ran out = %q; want %q", texts(rs), pausedText)
		}

		// Paused and not due: both, the pause first.
		row, err := s.Get(ctx, in[2].ID)
		if err != nil {
			t.Fatal(err)
		}
		rs = why(t, s, in[2].ID)
		if len(rs) != 2 || rs[0].Text != pausedText || rs[1].Kind != lease.ReasonNotDue || !rs[1].DueAt.Equal(row.NextAttemptAt) {
			t.Fatalf("reasons of a future row of a paused queue = %+v; want the pause, then not due at %v", rs, row.NextAttemptAt)
		}
		// The wait is from the database's now: under the hour asked for,
		// and not by more than this test's own run (a generous bound).
		if rs[1].DueIn > time.Hour || rs[1].DueIn < 50*time.Minute {
			t.Errorf("DueIn = %v; want just under an hour", rs[1].DueIn)
		}
		wantText := fmt.Sprintf("not due until %s (in %s, by the database clock)",
			row.NextAttemptAt.UTC().Format("2006-01-02 15:04:05Z"), rs[1].DueIn.Round(time.Second))
		if rs[1].Text != wantText {
			t.Errorf("text %q; want %q", rs[1].Text, wantText)
		}

		// Resumed: nothing holds the due row, the future row is not due.
		if _, err := s.ResumeQueue(ctx, "bulk"); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, in[1].ID, "a due row of a resumed queue")
		if rs := why(t, s, in[2].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonNotDue {
			t.Errorf("reasons of a future row of a resumed queue = %q; want not due only", texts(rs))
		}
		if rs := why(t, s, in[3].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonNotDue || !strings.HasPrefix(rs[0].Text, "not due until ") {
			t.Errorf("reasons of a future row = %q; want not due", texts(rs))
		}

		// Due now: nothing holds it.
		if err := leasetest.MakeDue(ctx, s, in[3].ID); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, in[3].ID, "a row made due")

		if _, err := s.WhyNotRunning(ctx, 1<<40); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("a row that does not exist: %v; want ErrNotFound", err)
		}
	})
}

// A WAITING row names its key, its head with the head's status, and the
// rows waiting before it; a FAILED head is said to hold the key until it
// is requeued or discarded. The head itself has no reason.
func TestWhyAWaitingKey(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", Key: "order-7"},
			lease.Event{Kind: "k", Key: "order-7"},
			lease.Event{Kind: "k", Key: "order-7"},
		)
		head := fmt.Sprint(in[0].ID)
		wantNoReason(t, s, in[0].ID, "a key's head, due")
		rs := why(t, s, in[1].ID)
		want := lease.Reason{Kind: lease.ReasonKey, Key: "order-7", HeadID: in[0].ID, HeadStatus: leasework.StatusReady,
			Text: `waiting for key "order-7": its head, event ` + head + `, is READY`}
		if len(rs) != 1 || rs[0] != want {
			t.Fatalf("reasons of the second row = %+v; want %+v", rs, want)
		}
		rs = why(t, s, in[2].ID)
		if len(rs) != 1 || rs[0].Ahead != 1 || rs[0].HeadID != in[0].ID ||
			rs[0].Text != `waiting for key "order-7": its head, event `+head+`, is READY; 1 more event waits before this one` {
			t.Fatalf("reasons of the third row = %+v; want behind the head and one more", rs)
		}

		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 10, Lease: time.Minute})
		if err != nil || len(claims) != 1 || claims[0].ID != in[0].ID {
			t.Fatalf("claim = %+v, %v; want the head only", claims, err)
		}
		if rs := why(t, s, in[1].ID); len(rs) != 1 || rs[0].HeadStatus != leasework.StatusInProgress ||
			rs[0].Text != `waiting for key "order-7": its head, event `+head+`, is INPROGRESS` {
			t.Errorf("reasons behind a running head = %q", texts(rs))
		}
		write(t, s, lease.Fail(claims[0].Ref(), "boom"))
		rs = why(t, s, in[1].ID)
		if len(rs) != 1 || rs[0].HeadStatus != leasework.StatusFailed ||
			rs[0].Text != `waiting for key "order-7", held by its head, event `+head+`, FAILED: it holds the key until it is requeued or discarded` {
			t.Errorf("reasons behind a FAILED head = %q", texts(rs))
		}
		wantNoReason(t, s, in[0].ID, "a FAILED head")

		// Its queue paused as well: the pause first.
		if _, err := s.PauseQueue(ctx, lease.DefaultQueue); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, in[2].ID); len(rs) != 2 || rs[0].Kind != lease.ReasonPaused || rs[1].Kind != lease.ReasonKey || rs[1].Ahead != 1 {
			t.Errorf("reasons of a waiting row of a paused queue = %q; want the pause, then the key", texts(rs))
		}
	})
}

// A partition's limit holds its due READY rows once full, and its rows set
// aside (WAITING without a key) say so, never that they wait for a key:
// named by the partition's own limit, or by the default with the
// partition, with the partition's live attempts alone; a row of no
// partition, or of a partition with room, has no such reason. A set-aside
// row whose partition has room again (an attempt's lease ran out, a
// raise) or no limit any more (cleared) says the next claims bring it
// back.
func TestWhyAPartitionLimitHoldsARow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		setLimit(t, s, partitionLimit("", 2))
		setLimit(t, s, partitionLimit("acme", 1))
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "k", Partition: "acme"}, lease.Event{Kind: "k", Partition: "acme"},
			lease.Event{Kind: "k", Partition: "acme", Key: "order-1"},
			lease.Event{Kind: "k", Partition: "beta"}, lease.Event{Kind: "k", Partition: "beta"},
			lease.Event{Kind: "k", Partition: "beta"},
		)
		acme1, acme2, acmeKeyed, beta3 := in[0].ID, in[1].ID, in[2].ID, in[5].ID
		wantNoReason(t, s, acme2, "a due row of a partition with room")

		// One claim of one row: acme's first, which fills acme.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1}); len(c) != 1 || c[0].ID != acme1 {
			t.Fatalf("claimed %+v; want acme's first row", c)
		}
		held := "held by concurrency limit partition:acme (1/1 live): it starts when one of those attempts ends, or the limit is raised or cleared"
		want := lease.Reason{Kind: lease.ReasonPartition, Limit: partitionLimit("acme", 1), Live: 1, Partition: "acme", Text: held}
		if rs := why(t, s, acme2); len(rs) != 1 || rs[0] != want {
			t.Fatalf("reasons of a due READY row of a full partition = %+v; want %+v", rs, want)
		}
		// A keyed row is not set aside; its partition holds it all the same.
		if rs := why(t, s, acmeKeyed); len(rs) != 1 || rs[0] != want {
			t.Fatalf("reasons of a keyed READY row of a full partition = %+v; want %+v", rs, want)
		}

		// The next claim sets aside the rows the full partitions hold back.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 100}); len(c) != 2 {
			t.Fatalf("claimed %d rows; want beta's first two", len(c))
		}
		row, err := s.Get(ctx, acme2)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != leasework.StatusWaiting || row.Key != "" || row.Partition != "acme" {
			t.Fatalf("acme's second row: %s, key %q, partition %q; want set aside: WAITING without a key, in acme", row.Status, row.Key, row.Partition)
		}
		want.SetAside = true
		want.Text = "held by concurrency limit partition:acme (1/1 live), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared"
		if rs := why(t, s, acme2); len(rs) != 1 || rs[0] != want {
			t.Fatalf("reasons of a row set aside = %+v; want %+v (and no key)", rs, want)
		}
		wantBeta := lease.Reason{Kind: lease.ReasonPartition, Limit: partitionLimit("", 2), Live: 2, Partition: "beta", SetAside: true,
			Text: "held by concurrency limit partition default (2/2 live in partition beta), set aside (WAITING): it starts when one of those attempts ends, or the limit is raised or cleared"}
		if rs := why(t, s, beta3); len(rs) != 1 || rs[0] != wantBeta {
			t.Fatalf("reasons of a row set aside under the default = %+v; want %+v", rs, wantBeta)
		}
		// A row of no partition, and one of a partition with room: none.
		more := pgtest.Enqueue(t, s, lease.Event{Kind: "k"}, lease.Event{Kind: "k", Partition: "gamma"})
		wantNoReason(t, s, more[0].ID, "a due row of no partition, under a default partition limit")
		wantNoReason(t, s, more[1].ID, "a due row of a partition under the default, with room")

		// Its queue paused as well: the pause first.
		if _, err := s.PauseQueue(ctx, lease.DefaultQueue); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, acme2); len(rs) != 2 || rs[0].Kind != lease.ReasonPaused || rs[1] != want {
			t.Errorf("reasons of a row set aside in a paused queue = %q; want the pause, then the partition", texts(rs))
		}
		if _, err := s.ResumeQueue(ctx, lease.DefaultQueue); err != nil {
			t.Fatal(err)
		}

		// Held at 0, and lowered below its live attempts.
		setLimit(t, s, partitionLimit("acme", 0))
		if rs := why(t, s, acme2); len(rs) != 1 || rs[0].Live != 1 || rs[0].Limit.Max != 0 ||
			rs[0].Text != "held by concurrency limit partition:acme (1/0 live), set aside (WAITING): the limit is 0, so none of its attempts starts until it is raised or cleared" {
			t.Errorf("reasons under a limit of 0 = %q", texts(rs))
		}
		setLimit(t, s, partitionLimit("", 1))
		if rs := why(t, s, beta3); len(rs) != 1 || rs[0].Live != 2 || rs[0].Limit != partitionLimit("", 1) ||
			rs[0].Text != "held by concurrency limit partition default (2/1 live in partition beta), set aside (WAITING): the limit was lowered below the attempts that run; it starts once enough of them have ended, or the limit is raised or cleared" {
			t.Errorf("reasons under a lowered default = %q", texts(rs))
		}
		setLimit(t, s, partitionLimit("acme", 1))

		// The attempt's lease ran out: it no longer counts; the row set
		// aside says the partition has room.
		if err := leasetest.ExpireLease(ctx, s, acme1); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, acme2); len(rs) != 1 || rs[0].Kind != lease.ReasonPartition || rs[0].Live != 0 || !rs[0].SetAside ||
			rs[0].Text != "set aside by concurrency limit partition:acme (0/1 live) while it was full: it has room now, and the next claims take it or bring it back READY" {
			t.Errorf("reasons of a row set aside once its partition's attempt's lease ran out = %q (%+v)", texts(rs), rs)
		}
		wantNoReason(t, s, acmeKeyed, "a due keyed row of a partition whose attempt's lease ran out")

		// Every partition limit cleared.
		for _, p := range []string{"acme", ""} {
			if _, err := s.ClearLimit(ctx, lease.ScopePartition, p, "test"); err != nil {
				t.Fatal(err)
			}
		}
		wantCleared := lease.Reason{Kind: lease.ReasonPartition, Partition: "acme", SetAside: true,
			Text: "set aside by a concurrency limit of partition acme, cleared since: the next claims bring it back READY"}
		if rs := why(t, s, acme2); len(rs) != 1 || rs[0] != wantCleared {
			t.Errorf("reasons of a row set aside by a limit cleared since = %+v; want %+v", rs, wantCleared)
		}
		// The next claims bring it back, and take it.
		var got []int64
		for _, c := range claimUntil(t, s, "", 3) {
			got = append(got, c.ID)
		}
		if !slices.Contains(got, acme2) || !slices.Contains(got, beta3) {
			t.Errorf("claims once every partition limit was cleared took %v; want the rows set aside among them", got)
		}
		wantNoReason(t, s, acme2, "a row set aside, claimed once its limit was cleared")
	})
}

// startsRange reads the oldest and the newest start any rate limit's
// shares hold.
func startsRange(t *testing.T, s *lease.Store) (oldest, newest time.Time) {
	t.Helper()
	if err := s.DB().QueryRow(`SELECT min(t), max(t) FROM `+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_rate_shares")+
		`, unnest(starts) AS t`).Scan(&oldest, &newest); err != nil {
		t.Fatal(err)
	}
	return oldest, newest
}

// A rate limit without room for a due row's cost holds it, named with its
// starts in the window, the row's cost and when the window first has room
// for that cost: a start, once the oldest leaves the window; two, once
// the second-oldest does. A row that costs more than the limit's Max
// never starts under it, and says so, whatever the window's room. A
// kind's limit comes before its queue's; a row whose lease ran out is
// held as well (its take-back is a start); a row with room for its cost,
// or under a limit cleared or a window passed, is not. Rows give their
// cost.
func TestWhyARateLimitHoldsARow(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		sms := lease.RateLimit{Scope: lease.ScopeKind, Name: "sms.send", Max: 3, Per: time.Minute}
		setRateLimit(t, s, sms)
		in := pgtest.Enqueue(t, s,
			lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send"},
			lease.Event{Kind: "sms.send"}, lease.Event{Kind: "sms.send", Cost: 2}, lease.Event{Kind: "sms.send", Cost: 5})
		first, cheap, pricey, huge := in[0].ID, in[3].ID, in[4].ID, in[5].ID
		for id, want := range map[int64]int{cheap: 1, pricey: 2, huge: 5} {
			if r, err := s.Get(ctx, id); err != nil || r.Cost != want {
				t.Errorf("Get(%d).Cost = %d, %v; want %d", id, r.Cost, err, want)
			}
		}
		if rows, err := s.List(ctx, lease.ListRequest{Kind: "sms.send"}); err != nil || len(rows) != 6 || rows[4].Cost != 2 || rows[0].Cost != 1 {
			t.Errorf("List: %d rows, %v; want 6, the fifth costing 2", len(rows), err)
		}
		wantNoReason(t, s, cheap, "a due row under a rate limit with room")
		wantNoReason(t, s, pricey, "a due row costing 2 under a rate limit with room for 3")
		hugeText := "held by rate limit kind:sms.send (0/3 starts per 1m0s): it costs 5 starts, more than the limit allows in a window, so it never starts until the limit is raised or cleared"
		wantHuge := lease.Reason{Kind: lease.ReasonRate, Rate: sms, Recent: 0, Cost: 5, Text: hugeText}
		if rs := why(t, s, huge); len(rs) != 1 || rs[0] != wantHuge {
			t.Fatalf("reasons of a row costing more than the limit's Max = %+v; want %+v", rs, wantHuge)
		}

		// One start, then two more 40 seconds later: the window is full.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1}); len(c) != 1 || c[0].ID != first {
			t.Fatalf("claimed %+v; want the first row", c)
		}
		ageStarts(t, s, 40*time.Second)
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2}); len(c) != 2 {
			t.Fatalf("claimed %d rows; want 2", len(c))
		}
		oldest, newest := startsRange(t, s)
		rls, err := s.RateLimits(ctx)
		if err != nil || len(rls) != 1 || !rls[0].NextAt.Equal(oldest.Add(time.Minute)) {
			t.Fatalf("RateLimits = %+v, %v; want it full, with room when the oldest start, of %v, leaves", rls, err, oldest)
		}
		rs := why(t, s, cheap)
		if len(rs) != 1 || rs[0].Kind != lease.ReasonRate || rs[0].Rate != sms || rs[0].Recent != 3 || rs[0].Cost != 1 ||
			!rs[0].NextAt.Equal(oldest.Add(time.Minute)) || rs[0].NextIn <= 0 || rs[0].NextIn > 20*time.Second {
			t.Fatalf("reasons of a due row under a full rate limit = %+v; want the limit, 3 recent, next start at %v, in under 20s",
				rs, oldest.Add(time.Minute))
		}
		want := fmt.Sprintf("held by rate limit kind:sms.send (3/3 starts per 1m0s): the next start is allowed at %s (in %s, by the database clock); or when the limit is raised or cleared",
			oldest.Add(time.Minute).UTC().Format("2006-01-02 15:04:05Z"), rs[0].NextIn.Round(time.Second))
		if rs[0].Text != want {
			t.Errorf("text %q; want %q", rs[0].Text, want)
		}
		// Two starts: once the second-oldest start leaves, a minute after
		// the newest claim.
		rs = why(t, s, pricey)
		if len(rs) != 1 || rs[0].Kind != lease.ReasonRate || rs[0].Cost != 2 || !rs[0].NextAt.Equal(newest.Add(time.Minute)) ||
			rs[0].NextIn < 40*time.Second || rs[0].NextIn > time.Minute {
			t.Fatalf("reasons of a row costing 2 under a full rate limit = %+v; want room for its 2 starts at %v", rs, newest.Add(time.Minute))
		}
		want = fmt.Sprintf("held by rate limit kind:sms.send (3/3 starts per 1m0s): it costs 2 starts, which the window has room for at %s (in %s, by the database clock), unless other events take it first; or when the limit is raised or cleared",
			newest.Add(time.Minute).UTC().Format("2006-01-02 15:04:05Z"), rs[0].NextIn.Round(time.Second))
		if rs[0].Text != want {
			t.Errorf("text %q; want %q", rs[0].Text, want)
		}
		wantHuge.Recent, wantHuge.Text = 3, strings.Replace(hugeText, "(0/3", "(3/3", 1)
		if rs := why(t, s, huge); len(rs) != 1 || rs[0] != wantHuge {
			t.Errorf("reasons of a row costing more than the limit's Max, the window full = %+v; want %+v", rs, wantHuge)
		}

		// A lease that ran out: taking it back is a start, which the full
		// window holds back.
		if err := leasetest.ExpireLease(ctx, s, first); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, first); len(rs) != 1 || rs[0].Kind != lease.ReasonRate || rs[0].Cost != 1 || !rs[0].NextAt.Equal(oldest.Add(time.Minute)) {
			t.Errorf("reasons of a row whose lease ran out under a full rate limit = %+v; want the limit", rs)
		}
		// On its last attempt, a claim ends it FAILED: no start, no reason.
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET max_attempts = attempt WHERE id = $1`, first); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, first, "a row whose lease ran out on its last attempt")
		if _, err := s.DB().ExecContext(ctx, `UPDATE `+s.QualifiedTable()+` SET max_attempts = attempt + 1 WHERE id = $1`, first); err != nil {
			t.Fatal(err)
		}

		// The queue's rate limit as well, with room for one start: the
		// kind's first, then the queue's for the row costing 2 (more
		// than the queue's Max); none from the queue for a row costing 1.
		queue := lease.RateLimit{Scope: lease.ScopeQueue, Name: lease.DefaultQueue, Max: 1, Per: time.Hour}
		setRateLimit(t, s, queue)
		if rs := why(t, s, cheap); len(rs) != 1 || rs[0].Rate != sms {
			t.Errorf("reasons of a row costing 1 under the queue's limit with room = %q; want the kind's alone", texts(rs))
		}
		rs = why(t, s, pricey)
		if len(rs) != 2 || rs[0].Rate != sms || rs[1].Kind != lease.ReasonRate || rs[1].Rate != queue || rs[1].Recent != 0 || !rs[1].NextAt.IsZero() ||
			rs[1].Text != "held by rate limit queue:default (0/1 starts per 1h0m0s): it costs 2 starts, more than the limit allows in a window, so it never starts until the limit is raised or cleared" {
			t.Errorf("reasons of a row costing 2 under the kind's full limit and the queue's of 1 = %+v; want the kind's, then the queue's", rs)
		}

		// Lowered below the starts in its window: the figures say so.
		setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "sms.send", Max: 2, Per: time.Minute})
		if rs := why(t, s, cheap); len(rs) != 1 || rs[0].Recent != 3 || rs[0].Rate.Max != 2 || rs[0].NextAt.IsZero() ||
			!strings.HasPrefix(rs[0].Text, "held by rate limit kind:sms.send (3/2 starts per 1m0s): the next start is allowed at ") {
			t.Errorf("reasons under a lowered rate limit = %+v", rs)
		}

		// The kind's limit cleared: the queue's holds the row costing 2
		// alone, and nothing the row costing 1.
		if _, err := s.ClearRateLimit(ctx, lease.ScopeKind, "sms.send", "test"); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, cheap, "a row costing 1 under the queue's rate limit with room, its kind's cleared")
		if rs := why(t, s, pricey); len(rs) != 1 || rs[0].Rate != queue {
			t.Errorf("reasons once the kind's rate limit was cleared = %q; want the queue's alone", texts(rs))
		}

		// The queue's limit full, then its window passed.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1}); len(c) != 1 {
			t.Fatalf("claimed %d rows under the queue's rate limit; want 1", len(c))
		}
		more := pgtest.EnqueueN(t, s, 1, "other")
		if rs := why(t, s, more[0].ID); len(rs) != 1 || rs[0].Rate != queue || rs[0].Recent != 1 || rs[0].NextIn < 59*time.Minute {
			t.Errorf("reasons of another kind's row under the queue's full rate limit = %+v; want the queue's, an hour to wait", rs)
		}
		ageStarts(t, s, time.Hour+time.Second)
		wantNoReason(t, s, more[0].ID, "a row once its queue's rate limit's window passed")
	})
}

// Limits counts the due READY rows each full limit holds back: a kind's
// in every queue, a queue's of every kind, never rows not yet due nor
// other kinds' and queues'; and none while a limit has room.
func TestLimitsCountTheRowsTheyHoldBack(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "a", Max: 1})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: "q2", Max: 1})
		setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "roomy", Max: 5})
		later := time.Now().Add(time.Hour)
		pgtest.Enqueue(t, s,
			// kind a: 3 due in default, 2 due in q2 (one at priority 4),
			// 1 not yet due.
			lease.Event{Kind: "a"}, lease.Event{Kind: "a"}, lease.Event{Kind: "a"},
			lease.Event{Kind: "a", Queue: "q2"}, lease.Event{Kind: "a", Queue: "q2", Priority: 4},
			lease.Event{Kind: "a", RunAt: later},
			// queue q2, other kinds: 2 due, 1 not yet due.
			lease.Event{Kind: "b", Queue: "q2"}, lease.Event{Kind: "b", Queue: "q2", Priority: 9},
			lease.Event{Kind: "b", Queue: "q2", RunAt: later},
			// a kind whose limit has room, and a kind under no limit.
			lease.Event{Kind: "roomy"}, lease.Event{Kind: "b"},
		)
		heldBack := func() map[string]int64 {
			t.Helper()
			ls, err := s.Limits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int64{}
			for _, l := range ls {
				out[l.Scope+":"+l.Name] = l.HeldBack
			}
			return out
		}
		if got := heldBack(); got["kind:a"] != 0 || got["queue:q2"] != 0 || got["kind:roomy"] != 0 {
			t.Fatalf("held back with every limit empty = %v; want 0 each", got)
		}
		// One a in default takes kind a's place; one b of q2 takes q2's.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1, Kinds: []string{"a"}}); len(c) != 1 {
			t.Fatalf("claimed %d of a; want 1", len(c))
		}
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 1, Kinds: []string{"b"}, Queue: "q2"}); len(c) != 1 || c[0].Kind != "b" {
			t.Fatalf("claimed %+v of q2; want one b", c)
		}
		want := map[string]int64{
			"kind:a":     2 + 2, // due: 2 left in default, 2 in q2
			"queue:q2":   2 + 1, // due: 2 of a, 1 of b left
			"kind:roomy": 0,
		}
		if got := heldBack(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("held back = %v; want %v", got, want)
		}
	})
}

// In a fair queue, a due READY row of a partition ahead of the partition
// furthest behind waits its turn, named with its partition's weight and
// how many rows it is ahead (its pass less the queue's lowest, times its
// weight: its own weight, else the default, as it is now); a row of the
// partition furthest behind has no such reason, nor one of a partition
// not served yet, nor a row not due (it is not due), nor any row while no
// partition is served or once the queue is no longer fair. A due row
// without a partition is taken in the queue's order, behind the fair ones.
func TestWhyAFairQueueTakesTurns(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		s := pgtest.Store(t, drv, lease.Options{})
		setWeight(t, s, lease.Weight{Queue: "bulk", Weight: 1})
		setWeight(t, s, lease.Weight{Queue: "bulk", Partition: "acme", Weight: 3})
		var es []lease.Event
		for range 8 {
			es = append(es, lease.Event{Kind: "a", Queue: "bulk", Partition: "acme"})
		}
		for range 3 {
			es = append(es, lease.Event{Kind: "b", Queue: "bulk", Partition: "beta"})
		}
		es = append(es, lease.Event{Kind: "b", Queue: "bulk"}, lease.Event{Kind: "a", Queue: "bulk", Partition: "acme", RunAt: time.Now().Add(time.Hour)},
			lease.Event{Kind: "a", Partition: "acme"})
		in := pgtest.Enqueue(t, s, es...)
		acme, beta, bare, future, plain := in[7].ID, in[8].ID, in[11].ID, in[12].ID, in[13].ID
		for id, what := range map[int64]string{acme: "acme's row", beta: "beta's row", bare: "a row without a partition"} {
			wantNoReason(t, s, id, what+" before any claim: no partition is served yet")
		}

		// A claim of kind a alone takes acme's first 4 rows: both
		// partitions come in at pass 0, and acme moves to 4/3; beta,
		// with due rows of another kind, stays at 0.
		if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 4, Queue: "bulk", Kinds: []string{"a"}}); len(c) != 4 || c[0].ID != in[0].ID || c[3].ID != in[3].ID {
			t.Fatalf("claimed %+v of kind a; want acme's first 4 rows", c)
		}
		wantAcme := lease.Reason{Kind: lease.ReasonFair, Queue: "bulk", Partition: "acme", Weight: 3, Ahead: 4,
			Text: "waits its turn in fair queue bulk: partition acme (weight 3) is 4 rows ahead of the partition furthest behind"}
		if rs := why(t, s, acme); len(rs) != 1 || rs[0] != wantAcme {
			t.Fatalf("reasons of acme's due row = %+v; want %+v", rs, wantAcme)
		}
		wantNoReason(t, s, beta, "beta's row, the partition furthest behind")
		wantBare := lease.Reason{Kind: lease.ReasonFair, Queue: "bulk",
			Text: "has no partition in fair queue bulk: it is taken in the queue's order, behind the partitions served by weight, when it is among the queue's oldest due events"}
		if rs := why(t, s, bare); len(rs) != 1 || rs[0] != wantBare {
			t.Fatalf("reasons of a row without a partition = %+v; want %+v", rs, wantBare)
		}
		if rs := why(t, s, future); len(rs) != 1 || rs[0].Kind != lease.ReasonNotDue {
			t.Errorf("reasons of acme's row not due = %q; want not due only", texts(rs))
		}
		wantNoReason(t, s, plain, "acme's row in a queue that is not fair")
		wantNoReason(t, s, in[0].ID, "acme's running row")

		// A claim beside one in an open transaction, which holds acme's
		// pass, owes acme its row (1/3): the pass counts the debt (5/3),
		// then the other's row too once it commits (2).
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if c, err := s.ClaimTx(ctx, tx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "bulk", Kinds: []string{"a"}}); err != nil || len(c) != 1 || c[0].ID != in[4].ID {
			t.Fatalf("claim in an open transaction = %+v, %v; want acme's fifth row", c, err)
		}
		// A generous liveness bound: the claim waits for nothing.
		bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if c, err := s.Claim(bounded, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: "bulk", Kinds: []string{"a"}}); err != nil || len(c) != 1 || c[0].ID != in[5].ID {
			t.Fatalf("claim beside the open transaction = %+v, %v; want acme's sixth row", c, err)
		}
		if rs := why(t, s, in[6].ID); len(rs) != 1 || rs[0].Ahead != 5 {
			t.Errorf("reasons of acme's row with a debt of 1/3 = %+v; want 5 rows ahead", rs)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, in[6].ID); len(rs) != 1 || rs[0].Ahead != 6 {
			t.Errorf("reasons of acme's row once the other claim committed = %+v; want 6 rows ahead", rs)
		}
		acme = in[6].ID
		gamma := pgtest.Enqueue(t, s, lease.Event{Kind: "a", Queue: "bulk", Partition: "gamma"})[0].ID
		wantNoReason(t, s, gamma, "a row of a partition not served yet")

		// The weight as it is now: acme (a pass of 2) at 5 is 10 rows
		// ahead; with its own weight cleared, at the default of 1, 2.
		setWeight(t, s, lease.Weight{Queue: "bulk", Partition: "acme", Weight: 5})
		if rs := why(t, s, acme); len(rs) != 1 || rs[0].Weight != 5 || rs[0].Ahead != 10 ||
			rs[0].Text != "waits its turn in fair queue bulk: partition acme (weight 5) is 10 rows ahead of the partition furthest behind" {
			t.Errorf("reasons of acme's row at weight 5 = %+v; want 10 rows ahead", rs)
		}
		if _, err := s.ClearWeight(ctx, "bulk", "acme", "test"); err != nil {
			t.Fatal(err)
		}
		if rs := why(t, s, acme); len(rs) != 1 || rs[0].Weight != 1 || rs[0].Ahead != 2 ||
			rs[0].Text != "waits its turn in fair queue bulk: partition acme (weight 1) is 2 rows ahead of the partition furthest behind" {
			t.Errorf("reasons of acme's row at the default weight = %+v; want 2 rows ahead", rs)
		}

		// Not fair any more: nothing holds either.
		if _, err := s.ClearWeight(ctx, "bulk", "", "test"); err != nil {
			t.Fatal(err)
		}
		wantNoReason(t, s, acme, "acme's row once the queue is not fair")
		wantNoReason(t, s, bare, "a row without a partition once the queue is not fair")
	})
}

// explain runs EXPLAIN (options) of query in a transaction it rolls back.
func explain(t *testing.T, s *lease.Store, options, query string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return explainIn(t, tx, "EXPLAIN ("+options+") "+query)
}

// jitAboveCost is PostgreSQL's default jit_above_cost: a statement whose
// estimated cost reaches it is compiled by the server's JIT, where it has
// one (half a second for Limits' statement, once, on this machine).
const jitAboveCost = 100_000

var planCost = regexp.MustCompile(`cost=[\d.]+\.\.([\d.]+)`)

// estimatedCost is the total estimated cost of plan's top node.
func estimatedCost(t *testing.T, plan string) float64 {
	t.Helper()
	m := planCost.FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no cost in the plan:\n%s", plan)
	}
	cost, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return cost
}

// TestWhyAndLimitsReadTheirRowsOnlyWhateverThePlan: on a table with
// 20,000 DONE and 20,000 FAILED rows of history, 20,000 READY rows not
// yet due and 20,000 running leases under no limit, WhyNotRunning reads
// its row and what it names (its limits' slots and the attempts counted
// under a limit; its key's head and the rows before it; its partition's
// limit and slot, never the live attempts of its partition or of the
// 300 other partitions, each with a live attempt and a row set aside;
// its kind's and queue's rate limits and their shares, by their primary
// keys),
// with custom and generic plans; and Limits, with a limit full, reads the due READY rows
// it counts and the attempts counted under a limit, never the rows not
// yet due (they are passed over in the READY index), the other running
// leases or the history, and with its limits not full, no READY row at
// all. (The rows read count every table's: the limits, their slots, the
// paused queues.) Neither statement's estimated cost reaches the
// threshold at which the server compiles it (JIT).
//
// The attempts counted under a limit are read through their index
// (migration 18), which the planner prefers to the index of every running
// lease when the statistics know of the running leases; when they say
// there are none, it may read that one instead, as the claim's sweep
// does.
func TestWhyAndLimitsReadTheirRowsOnlyWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	const history = 20_000
	if err := leasetest.InsertFinished(ctx, s, history); err != nil {
		t.Fatal(err)
	}
	if err := leasetest.InsertFailed(ctx, s, history); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind, queue, next_attempt_at)
		SELECT 'later-' || g, 'k', 'q' || (g % 3), statement_timestamp() + interval '1 day'
		FROM generate_series(1, $1::int) AS g`, history); err != nil {
		t.Fatal(err)
	}
	const due = 30
	setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "k", Max: 3})
	setLimit(t, s, lease.Limit{Scope: lease.ScopeQueue, Name: "q1", Max: 2})
	setLimit(t, s, lease.Limit{Scope: lease.ScopeKind, Name: "wide", Max: lease.MaxLimit})
	in := pgtest.EnqueueN(t, s, due, "k")
	keyed := pgtest.Enqueue(t, s, lease.Event{Kind: "keyed", Key: "x"}, lease.Event{Kind: "keyed", Key: "x"}, lease.Event{Kind: "keyed", Key: "x"})
	wide := pgtest.EnqueueN(t, s, 1, "wide")
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+`
		(event_id, kind, queue, status, generation, attempt, lease_until)
		SELECT 'running-' || g, 'other', 'busy', 'INPROGRESS', 1, 1, statement_timestamp() + interval '1 hour'
		FROM generate_series(1, $1::int) AS g`, history); err != nil {
		t.Fatal(err)
	}
	// 300 partitions under the default limit of 1, each with a live
	// attempt and a row set aside; partition "target", under its own
	// limit of 3, with 3 live attempts, a row set aside and a keyed row
	// READY (a keyed row is not set aside).
	setLimit(t, s, partitionLimit("", 1))
	setLimit(t, s, partitionLimit("target", 3))
	const partitions = 300
	var parted []lease.Event
	for i := range 2 * partitions {
		parted = append(parted, lease.Event{Kind: "p", Queue: "parts", Partition: fmt.Sprint("tenant-", i%partitions)})
	}
	pgtest.Enqueue(t, s, parted...)
	target := pgtest.Enqueue(t, s,
		lease.Event{Kind: "p", Queue: "parts", Partition: "target"}, lease.Event{Kind: "p", Queue: "parts", Partition: "target"},
		lease.Event{Kind: "p", Queue: "parts", Partition: "target"}, lease.Event{Kind: "p", Queue: "parts", Partition: "target"},
		lease.Event{Kind: "p", Queue: "parts", Partition: "target", Key: "t"})
	if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2*partitions + 10, Queue: "parts"}); len(c) != partitions+3 {
		t.Fatalf("claimed %d rows of the partitions; want %d", len(c), partitions+3)
	}
	for _, id := range []int64{target[3].ID, target[4].ID} {
		if rs := why(t, s, id); len(rs) != 1 || rs[0].Kind != lease.ReasonPartition || rs[0].Live != 3 {
			t.Fatalf("reasons of row %d of the full partition = %q; want its limit, 3 live", id, texts(rs))
		}
	}
	// Kind r and queue rq under rate limits, r's full (3 starts in its
	// window) with a row held, one costing more than the queue's Max.
	setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeKind, Name: "r", Max: 3, Per: time.Hour})
	setRateLimit(t, s, lease.RateLimit{Scope: lease.ScopeQueue, Name: "rq", Max: 100, Per: time.Hour})
	rated := pgtest.Enqueue(t, s, lease.Event{Kind: "r", Queue: "rq"}, lease.Event{Kind: "r", Queue: "rq"},
		lease.Event{Kind: "r", Queue: "rq"}, lease.Event{Kind: "r", Queue: "rq"}, lease.Event{Kind: "r", Queue: "rq", Cost: 200})
	if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 10, Queue: "rq"}); len(c) != 3 {
		t.Fatalf("claimed %d rows of kind r; want 3, its rate limit", len(c))
	}
	if rs := why(t, s, rated[3].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonRate || rs[0].NextAt.IsZero() {
		t.Fatalf("reasons of a row under a full rate limit = %+v; want the limit, with when it has room", rs)
	}
	if rs := why(t, s, rated[4].ID); len(rs) != 2 || rs[1].Kind != lease.ReasonRate || rs[1].Rate.Scope != lease.ScopeQueue {
		t.Fatalf("reasons of a row costing more than its queue's rate limit = %+v; want its kind's and its queue's", rs)
	}
	if _, err := s.DB().ExecContext(ctx, "VACUUM (ANALYZE) "+s.QualifiedTable()); err != nil {
		t.Fatal(err)
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	check := func(what string, limitsMax int, whyMax map[string]int) {
		t.Helper()
		for name, c := range map[string]struct {
			id  int64
			max int
		}{
			"ready row":                {in[due-1].ID, whyMax["ready row"]},
			"waiting row":              {keyed[2].ID, whyMax["waiting row"]},
			"row of the widest limit":  {wide[0].ID, lease.MaxLimit + 10},
			"row set aside":            {target[3].ID, 20},
			"ready row of a partition": {target[4].ID, 20},
			// Its row, its kind's and queue's rate limits and their 16
			// shares each; a full one's shares again, for when it has
			// room.
			"row of a full rate limit": {rated[3].ID, 60},
			"row too costly":           {rated[4].ID, 60},
		} {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := shortLines(explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", mode, lease.WhyStatement(s), fmt.Sprint(c.id)))
				if cost := estimatedCost(t, explainPreparedWith(t, conn, "FORMAT TEXT", mode, lease.WhyStatement(s), fmt.Sprint(c.id))); cost >= jitAboveCost {
					t.Errorf("why, %s, %s, %s: an estimated cost of %.0f: the server compiles the statement (JIT) at each call", what, name, mode, cost)
				}
				read, _ := rowsRead(plan)
				t.Logf("why, %s, %s, %s: %d rows read", what, name, mode, read)
				if read > c.max || strings.Contains(plan, "Seq Scan on "+s.Table()+" ") {
					t.Errorf("why, %s, %s, %s: %d rows read; want at most %d, and no sequential read:\n%s", what, name, mode, read, c.max, plan)
				}
			}
		}
		plan := shortLines(explain(t, s, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", lease.LimitsSQL(s)))
		if cost := estimatedCost(t, explain(t, s, "FORMAT TEXT", lease.LimitsSQL(s))); cost >= jitAboveCost {
			t.Errorf("limits, %s: an estimated cost of %.0f: the server compiles the statement (JIT) at each call", what, cost)
		}
		read, _ := rowsRead(plan)
		t.Logf("limits, %s: %d rows read", what, read)
		if read > limitsMax || strings.Contains(plan, "Seq Scan on "+s.Table()+" ") {
			t.Errorf("limits, %s: %d rows read; want at most %d, and no sequential read:\n%s", what, read, limitsMax, plan)
		}
	}
	// Room: Limits reads no READY row.
	// Bounds of a few dozen rows (each limit's 16 slots among them),
	// against 20,000 of each kind of row that must not be read.
	check("limits with room", 60, map[string]int{"ready row": 40, "waiting row": 10})
	if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 3, Kinds: []string{"k"}}); len(c) != 3 {
		t.Fatalf("claimed %d; want 3", len(c))
	}
	// Full: the kind's limit reads its 3 attempts and every due READY row
	// (each read for its kind), the keyed head's too; the queue's limit
	// has room.
	if ls, err := s.Limits(ctx); err != nil || len(ls) != 5 || ls[0].Name != "k" || ls[0].HeldBack != due-3 || ls[1].HeldBack != 0 || ls[2].HeldBack != 0 {
		t.Fatalf("Limits = %+v, %v; want kind k holding back %d, kind wide and queue q1 none, then the partitions' two", ls, err, due-3)
	}
	check("a limit full", 100, map[string]int{"ready row": 40, "waiting row": 10})
}

// TestWhyOfAFairQueueReadsItsRowsOnlyWhateverThePlan: in a fair queue of
// 1,000 partitions served, each with due rows, beside 20,000 DONE rows,
// WhyNotRunning of a row of a partition ahead reads its row, the queue's
// default weight and its partition's (the primary key of the weights),
// its partition's pass (the primary key of fair_keys) and the queue's
// lowest pass (the first entry of the (queue, pass) index), never the
// other partitions' passes or rows, with custom and generic plans; so
// does a row without a partition.
func TestWhyOfAFairQueueReadsItsRowsOnlyWhateverThePlan(t *testing.T) {
	s := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	ctx := context.Background()
	if err := leasetest.InsertFinished(ctx, s, 20_000); err != nil {
		t.Fatal(err)
	}
	setWeight(t, s, lease.Weight{Queue: "fairq", Weight: 1})
	setWeight(t, s, lease.Weight{Queue: "fairq", Partition: "lead", Weight: 2})
	const partitions = 1000
	var fair []lease.Event
	for i := range 2 * partitions {
		fair = append(fair, lease.Event{Kind: "f", Queue: "fairq", Partition: fmt.Sprint("fair-", i%partitions)})
	}
	pgtest.Enqueue(t, s, fair...)
	lead := pgtest.Enqueue(t, s, lease.Event{Kind: "fl", Queue: "fairq", Partition: "lead"}, lease.Event{Kind: "fl", Queue: "fairq", Partition: "lead"},
		lease.Event{Kind: "fl", Queue: "fairq", Partition: "lead"}, lease.Event{Kind: "f", Queue: "fairq"})
	// Kind fl alone: lead's first 2 rows, its pass 1; every partition of
	// kind f comes in at pass 0.
	if c, _ := claimAll(t, s, lease.ClaimRequest{Limit: 2, Queue: "fairq", Kinds: []string{"fl"}}); len(c) != 2 || c[0].ID != lead[0].ID {
		t.Fatalf("claimed %+v of kind fl; want lead's first 2 rows", c)
	}
	ws, err := s.Weights(ctx)
	if err != nil || len(ws) != 2 || ws[0].Active != partitions+1 {
		t.Fatalf("weights = %+v, %v; want the default serving %d partitions", ws, err, partitions+1)
	}
	if rs := why(t, s, lead[2].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonFair || rs[0].Ahead != 2 || rs[0].Weight != 2 {
		t.Fatalf("reasons of lead's READY row = %q; want its turn, 2 rows ahead at weight 2", texts(rs))
	}
	if rs := why(t, s, lead[3].ID); len(rs) != 1 || rs[0].Kind != lease.ReasonFair || rs[0].Partition != "" {
		t.Fatalf("reasons of a row without a partition = %q; want the queue's order", texts(rs))
	}
	for _, table := range []string{s.QualifiedTable(), lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_fair_keys")} {
		if _, err := s.DB().ExecContext(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, id := range map[string]int64{"row of a partition ahead": lead[2].ID, "row without a partition": lead[3].ID} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := shortLines(explainPreparedWith(t, conn, "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF", mode, lease.WhyStatement(s), fmt.Sprint(id)))
			if cost := estimatedCost(t, explainPreparedWith(t, conn, "FORMAT TEXT", mode, lease.WhyStatement(s), fmt.Sprint(id))); cost >= jitAboveCost {
				t.Errorf("why, %s, %s: an estimated cost of %.0f: the server compiles the statement (JIT) at each call", name, mode, cost)
			}
			read, _ := rowsRead(plan)
			t.Logf("why, %s, %s: %d rows read", name, mode, read)
			// The row, two weights, two passes; nothing of the queue's
			// 1,000 partitions or 2,000 due rows.
			if read > 10 || strings.Contains(plan, "Seq Scan on "+s.Table()) {
				t.Errorf("why, %s, %s: %d rows read; want at most 10, and no sequential read:\n%s", name, mode, read, plan)
			}
		}
	}
}
