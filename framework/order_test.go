package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// A worker with many slots, handling events of many keys enqueued while it
// runs, with some attempts failing and retried: each key's events are
// handled one at a time and in enqueue order. The handler records (key,
// seq) in a sink table; the sink's own order must list each key's events
// 0, 1, 2, ... exactly once.
func TestWorkerHandlesEachKeyInOrder(t *testing.T) {
	alongside(t)
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		const keys, perKey = 12, 10
		s := newStore(t, drv)
		sink := ident(s.Schema()) + ".sink"
		execSQL(t, s, `CREATE TABLE `+sink+` (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, seq int NOT NULL)`)

		w := newWorker(t, s, framework.Config{Concurrency: 8})
		register(t, w, "k", framework.RetryPolicy{InitialInterval: time.Millisecond, RandomizationFactor: -1},
			func(ctx context.Context, c *leasework.Claim) error {
				seq, err := strconv.Atoi(string(c.Payload))
				if err != nil {
					return leasework.Permanent(err)
				}
				if c.Attempt == 1 && (seq+len(c.Key))%4 == 0 {
					return errors.New("first attempts of some events fail")
				}
				_, err = s.DB().ExecContext(ctx, `INSERT INTO `+sink+` (key, seq) VALUES ($1, $2)`, c.Key, seq)
				return err
			})
		stop := start(t, w)
		for i := range perKey {
			events := make([]lease.Event, keys)
			for k := range events {
				events[k] = lease.Event{Kind: "k", Key: fmt.Sprintf("order-%02d", k), Payload: []byte(strconv.Itoa(i))}
			}
			pgtest.Enqueue(t, s, events...)
		}
		waitFor(t, "every event completed", func() bool { return w.Counters().Completed == keys*perKey })
		stop()

		rows, err := s.DB().QueryContext(context.Background(), `SELECT key, seq FROM `+sink+` ORDER BY n`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		next := map[string]int{}
		for rows.Next() {
			var key string
			var seq int
			if err := rows.Scan(&key, &seq); err != nil {
				t.Fatal(err)
			}
			if seq != next[key] {
				t.Fatalf("key %s: handled event %d when %d was next", key, seq, next[key])
			}
			next[key]++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for k := range keys {
			if key := fmt.Sprintf("order-%02d", k); next[key] != perKey {
				t.Errorf("key %s: %d events handled, want %d", key, next[key], perKey)
			}
		}
		if c := w.Counters(); c.Completed != keys*perKey {
			t.Errorf("counters %+v", c)
		}
	})
}
