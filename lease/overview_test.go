package lease_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// Counts gives the rows per queue, kind and status, sorted, and leaves out
// the combinations without rows.
func TestCounts(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		if got, err := s.Counts(ctx); err != nil || len(got) != 0 {
			t.Fatalf("Counts of an empty table = %v, %v; want none", got, err)
		}
		pgtest.Enqueue(t, s,
			lease.Event{Kind: "mail"}, lease.Event{Kind: "mail"},
			lease.Event{Kind: "mail", Queue: "bulk"},
			lease.Event{Kind: "sms", MaxAttempts: 1},
		)
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Kinds: []string{"sms"}})
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: %v, %v", claims, err)
		}
		if _, err := s.Write(ctx, lease.Fail(claims[0].Ref(), "no")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, c := range got {
			lines = append(lines, fmt.Sprintf("%s/%s/%s=%d", c.Queue, c.Kind, c.Status, c.Rows))
		}
		want := "bulk/mail/READY=1 default/mail/READY=2 default/sms/FAILED=1"
		if strings.Join(lines, " ") != want {
			t.Errorf("Counts = %v; want %s", lines, want)
		}
	})
}

// Throughput has one entry per minute of the window, oldest first, the
// current minute last, and counts each DONE and FAILED row in the minute it
// finished; rows finished before the window, and rows in other states,
// are not counted.
func TestThroughput(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		s := pgtest.Store(t, drv, lease.Options{})
		ctx := context.Background()
		pgtest.EnqueueN(t, s, 6, "k")
		claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 5, Lease: time.Minute})
		if err != nil || len(claims) != 5 {
			t.Fatalf("claim: %d claims, %v", len(claims), err)
		}
		for _, c := range claims[:3] {
			if _, err := s.Write(ctx, lease.Complete(c.Ref())); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range claims[3:] {
			if _, err := s.Write(ctx, lease.Fail(c.Ref(), "no")); err != nil {
				t.Fatal(err)
			}
		}
		// A fixture, not a wait: one DONE row finished five minutes ago, one
		// two hours ago (before the window), and one FAILED row ten minutes
		// ago, by the database clock.
		moves := []struct {
			id  int64
			ago string
		}{{claims[0].ID, "5 minutes"}, {claims[1].ID, "2 hours"}, {claims[3].ID, "10 minutes"}}
		for _, m := range moves {
			_, err := s.DB().ExecContext(ctx, "UPDATE "+s.QualifiedTable()+
				" SET finished_at = date_trunc('minute', statement_timestamp()) - interval '"+m.ago+"' WHERE id = $1", m.id)
			if err != nil {
				t.Fatal(err)
			}
		}
		var now time.Time
		if err := s.DB().QueryRowContext(ctx, "SELECT date_trunc('minute', statement_timestamp())").Scan(&now); err != nil {
			t.Fatal(err)
		}
		got, err := s.Throughput(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 60 {
			t.Fatalf("Throughput(60) has %d minutes; want 60", len(got))
		}
		var done, failed int64
		for i, m := range got {
			if i > 0 && !m.Start.Equal(got[i-1].Start.Add(time.Minute)) {
				t.Errorf("minute %d starts at %v, not a minute after %v", i, m.Start, got[i-1].Start)
			}
			done, failed = done+m.Done, failed+m.Failed
		}
		if done != 2 || failed != 2 {
			t.Errorf("the window counts %d DONE and %d FAILED; want 2 and 2 (one DONE row finished before it)", done, failed)
		}
		// The last minute is the current one (if the clock did not turn a
		// minute between the two statements, in which case it is the next).
		last := got[59]
		if !last.Start.Equal(now) && !last.Start.Equal(now.Add(time.Minute)) {
			t.Errorf("the last minute starts at %v; want the current minute %v", last.Start, now)
		}
		at := func(ago time.Duration) lease.Minute {
			for _, m := range got {
				if m.Start.Equal(now.Add(-ago)) {
					return m
				}
			}
			t.Fatalf("no minute starting %v before %v", ago, now)
			return lease.Minute{}
		}
		if m := at(5 * time.Minute); m.Done != 1 || m.Failed != 0 {
			t.Errorf("five minutes ago: %+v; want one DONE", m)
		}
		if m := at(10 * time.Minute); m.Done != 0 || m.Failed != 1 {
			t.Errorf("ten minutes ago: %+v; want one FAILED", m)
		}

		for _, bad := range []int{0, -1, lease.MaxThroughputMinutes + 1} {
			if _, err := s.Throughput(ctx, bad); err == nil || !strings.Contains(err.Error(), "minutes is") {
				t.Errorf("Throughput(%d) = %v; want an error naming minutes", bad, err)
			}
		}
	})
}
