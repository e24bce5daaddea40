package framework_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// roleDSN returns the test server's DSN logging in as role with password.
func roleDSN(t *testing.T, role, password string) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.User = url.UserPassword(role, password)
		return u.String()
	}
	return dsn + fmt.Sprintf(" user=%s password=%s", role, password)
}

// A worker runs under a role that may only read, update and delete the rows
// of its events table: no DDL, no other table (the event id table and the
// migrations table included). The table is migrated, and events enqueued,
// by an owner role. Through both drivers the worker completes plain events,
// keyed events in order, a retry, a renewed claim, and, with
// DeleteAtCompletion, deletes rows, whose event ids are then free again.
func TestWorkerRunsWithLeastPrivilege(t *testing.T) {
	pgtest.EachDriver(t, func(t *testing.T, drv leasework.Driver) {
		ctx := context.Background()
		admin := pgtest.Open(t, drv)
		var b [6]byte
		_, _ = rand.Read(b[:])
		suffix := hex.EncodeToString(b[:])
		owner, worker, password := "lw_owner_"+suffix, "lw_worker_"+suffix, "pw_"+suffix
		schema := pgtest.SchemaName()
		var database string
		if err := admin.QueryRowContext(ctx, "SELECT current_database()").Scan(&database); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", owner, password),
			fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", worker, password),
			fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", lease.QuoteIdent(database), owner),
		} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() {
			for _, q := range []string{
				"DROP SCHEMA IF EXISTS " + lease.QuoteIdent(schema) + " CASCADE",
				"DROP OWNED BY " + owner + ", " + worker,
				"DROP ROLE " + worker, "DROP ROLE " + owner,
			} {
				if _, err := admin.ExecContext(context.Background(), q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})

		// The owner migrates and grants the worker its rows, nothing else.
		ownerDB, err := drv.Open(roleDSN(t, owner, password))
		if err != nil {
			t.Fatal(err)
		}
		defer ownerDB.Close()
		s, err := lease.New(ownerDB, drv, lease.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"GRANT USAGE ON SCHEMA " + lease.QuoteIdent(schema) + " TO " + worker,
			"GRANT SELECT, UPDATE, DELETE ON " + s.QualifiedTable() + " TO " + worker,
			// The claim reads whether its queue is paused.
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_queues") + " TO " + worker,
			// The claim reads the concurrency limits, counts its places
			// in their slots and the places given back; an attempt's end
			// gives its places back.
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_limits") + " TO " + worker,
			"GRANT SELECT, UPDATE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_limit_slots") + " TO " + worker,
			"GRANT SELECT, INSERT, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_limit_releases") + " TO " + worker,
			// The same for the partition limits; a claim also makes a
			// partition's slot, and removes it once no limit applies.
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_partition_limits") + " TO " + worker,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_partition_slots") + " TO " + worker,
			"GRANT SELECT, INSERT, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_partition_releases") + " TO " + worker,
			// The claim reads the rate limits and records starts in
			// their shares.
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_rate_limits") + " TO " + worker,
			"GRANT SELECT, UPDATE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_rate_shares") + " TO " + worker,
			// The partitions' rate limits: their starts are kept in the
			// partitions' slots, and a claim that sets rows aside under
			// one writes a timer for when it has room again.
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_partition_rates") + " TO " + worker,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_partition_timers") + " TO " + worker,
			// The claim reads a queue's weights and aging, takes the
			// partitions come to a fair queue, moves their passes (or
			// owes the move of one another claim holds), and takes out
			// those with nothing due (each with an arrival for when its
			// next row is).
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_fair_weights") + " TO " + worker,
			"GRANT SELECT ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_queue_aging") + " TO " + worker,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_fair_keys") + " TO " + worker,
			"GRANT SELECT, INSERT, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_fair_arrivals") + " TO " + worker,
			"GRANT SELECT, INSERT, DELETE ON " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_fair_debts") + " TO " + worker,
		} {
			if _, err := ownerDB.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}

		workerDB, err := drv.Open(roleDSN(t, worker, password))
		if err != nil {
			t.Fatal(err)
		}
		defer workerDB.Close()
		for _, q := range []string{
			"CREATE TABLE " + lease.QuoteIdent(schema) + ".intruder (x int)",
			"SELECT count(*) FROM " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_migrations"),
			"SELECT count(*) FROM " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_event_ids"),
			"INSERT INTO " + lease.QuoteIdent(schema) + "." + lease.QuoteIdent(s.Table()+"_queues") + " (queue) VALUES ('q')",
			"INSERT INTO " + s.QualifiedTable() + " (event_id, kind) VALUES ('x', 'x')",
		} {
			_, err := workerDB.ExecContext(ctx, q)
			if got := drv.SQLState(err); got != "42501" {
				t.Errorf("as the worker, %s: %v (SQLSTATE %q); want insufficient_privilege, 42501", q, err, got)
			}
		}

		var failedOnce, renewed atomic.Bool
		run := func(cfg framework.Config, handle leasework.HandlerFunc) *framework.Worker {
			cfg.Schema, cfg.Logger = schema, testLogger()
			w, err := framework.New(workerDB, drv, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"plain", "keyed", "flaky", "slow"} {
				if err := w.Register(k, handle, framework.RetryPolicy{InitialInterval: time.Millisecond}); err != nil {
					t.Fatal(err)
				}
			}
			return w
		}
		handle := func(ctx context.Context, c *leasework.Claim) error {
			switch c.Kind {
			case "flaky":
				if failedOnce.CompareAndSwap(false, true) {
					return errors.New("first attempt fails")
				}
			case "slow": // held until a renewal of its lease shows in the table
				first := c.LeaseUntil
				deadline := time.Now().Add(waitTimeout)
				for time.Now().Before(deadline) {
					var until time.Time
					if err := admin.QueryRowContext(ctx, "SELECT lease_until FROM "+s.QualifiedTable()+" WHERE id = $1", c.ID).Scan(&until); err != nil {
						return err
					}
					if until.After(first) {
						renewed.Store(true)
						return nil
					}
					time.Sleep(10 * time.Millisecond)
				}
				return errors.New("no renewal seen")
			}
			return nil
		}
		var events []lease.Event
		for i := range 20 {
			events = append(events, lease.Event{Kind: "plain", EventID: fmt.Sprint("plain-", i)})
		}
		for i := range 5 {
			events = append(events, lease.Event{Kind: "keyed", Key: "customer-1", EventID: fmt.Sprint("keyed-", i)})
		}
		// Under a partition limit: claims count in the partition's slot,
		// set rows aside, and bring them back.
		if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopePartition, Max: 2}, "test"); err != nil {
			t.Fatal(err)
		}
		// Under a rate limit that admits them all: claims record starts.
		if _, _, err := s.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopeKind, Name: "plain", Max: 1000, Per: time.Hour}, "test"); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			events = append(events, lease.Event{Kind: "plain", Partition: "tenant", EventID: fmt.Sprint("tenant-", i)})
		}
		// Under a partition's rate limit that binds: claims keep the
		// partition's starts in its slot, set rows aside with a timer,
		// and bring them back when it rings.
		if _, _, err := s.SetRateLimit(ctx, lease.RateLimit{Scope: lease.ScopePartition, Name: "metered", Max: 2, Per: 200 * time.Millisecond}, "test"); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			events = append(events, lease.Event{Kind: "plain", Partition: "metered", EventID: fmt.Sprint("metered-", i)})
		}
		events = append(events, lease.Event{Kind: "flaky", EventID: "flaky"}, lease.Event{Kind: "slow", EventID: "slow"})
		ids := pgtest.Enqueue(t, s, events...)
		w := run(framework.Config{Concurrency: 10, Lease: time.Second, RenewEvery: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retention: -1}, handle)
		stop := start(t, w)
		for _, e := range ids {
			waitRow(t, s, e.ID, "every event DONE under the worker's role", func(r lease.Row) bool { return r.Status == leasework.StatusDone })
		}
		stop()
		if r, err := s.GetByEventID(ctx, "flaky"); err != nil || r.Attempt != 2 {
			t.Errorf("flaky event: %+v, %v; want DONE on attempt 2", r, err)
		}
		if !renewed.Load() {
			t.Error("the slow event's lease was never renewed")
		}

		// Deleting at completion: the rows go, and with them their ids.
		more := pgtest.EnqueueN(t, s, 10, "plain")
		w = run(framework.Config{Concurrency: 10, PollInterval: 20 * time.Millisecond, DeleteAtCompletion: true}, handle)
		stop = start(t, w)
		waitFor(t, "the rows deleted at completion", func() bool { return w.Counters().Completed == 10 })
		stop()
		for _, e := range more {
			if _, err := s.Get(ctx, e.ID); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("row %d after completion: %v; want it deleted", e.ID, err)
			}
		}
		again := pgtest.Enqueue(t, s, lease.Event{Kind: "plain", EventID: more[0].EventID})
		if len(again) != 1 || again[0].ID == 0 || again[0].Duplicate {
			t.Errorf("enqueue of a deleted row's event id: %+v; want a new row", again)
		}
		if c := w.Counters(); c.StaleRejections != 0 || c.ClaimErrors != 0 || c.OutcomesAbandoned != 0 {
			t.Errorf("counters %+v; want no rejected write, claim error or abandoned outcome", c)
		}
	})
}

// producerGrants are the rights a role that only enqueues needs on the
// store's table: insert events and read back their ids; for keyed events,
// what the commit-time ordering trigger (run with the enqueuer's rights)
// reads and writes; the event id table; the two sequences.
func producerGrants(s *lease.Store, role string) []string {
	schema := lease.QuoteIdent(s.Schema())
	name := func(suffix string) string { return schema + "." + lease.QuoteIdent(s.Table()+suffix) }
	return []string{
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT INSERT, SELECT (id, event_id) ON " + s.QualifiedTable() + " TO " + role,
		"GRANT SELECT (key, key_seq, status, kind, next_attempt_at), UPDATE (key_seq, status, next_attempt_at, updated_at) ON " +
			s.QualifiedTable() + " TO " + role,
		"GRANT INSERT, SELECT ON " + name("_event_ids") + " TO " + role,
		"GRANT USAGE ON SEQUENCE " + name("_id_seq") + ", " + name("_key_seq") + " TO " + role,
	}
}

// A producer runs under a role that may only enqueue: through both
// drivers it enqueues plain events, events with metadata, keyed events (the
// second of a key WAITING behind the first), and duplicates, skipped or
// refused; it can neither claim, read payloads, delete rows, pause a queue,
// read the migrations, nor create anything. Through every enqueue path:
// a COPY needs no right the INSERT does not.
func TestProducerEnqueuesWithLeastPrivilege(t *testing.T) {
	pgtest.EachEnqueuePath(t, func(t *testing.T, p pgtest.EnqueuePath) {
		drv := p.NewDriver()
		ctx := context.Background()
		admin := pgtest.Open(t, drv)
		s := pgtest.Store(t, drv, lease.Options{})
		var b [6]byte
		_, _ = rand.Read(b[:])
		producer, password := "lw_producer_"+hex.EncodeToString(b[:]), "pw_"+hex.EncodeToString(b[:])
		for _, q := range append([]string{fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", producer, password)}, producerGrants(s, producer)...) {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		producerDB, err := drv.Open(roleDSN(t, producer, password))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			producerDB.Close()
			for _, q := range []string{"DROP OWNED BY " + producer, "DROP ROLE " + producer} {
				if _, err := admin.ExecContext(context.Background(), q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})
		ps, err := lease.New(producerDB, drv, p.Options(lease.Options{Schema: s.Schema(), Table: s.Table()}))
		if err != nil {
			t.Fatal(err)
		}
		enqueue := func(opts lease.EnqueueOptions, events ...lease.Event) ([]lease.Enqueued, error) {
			tx, err := producerDB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ps.EnqueueWith(ctx, tx, opts, events...)
			if err != nil {
				tx.Rollback()
				return nil, err
			}
			return out, tx.Commit()
		}
		if _, err := enqueue(lease.EnqueueOptions{},
			lease.Event{Kind: "k", EventID: "plain"},
			lease.Event{Kind: "k", EventID: "meta", Metadata: map[string]string{"tenant": "acme"}},
			lease.Event{Kind: "k", EventID: "first", Key: "customer-1"},
		); err != nil {
			t.Fatalf("enqueue as the producer: %v", err)
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "second", Key: "customer-1"}); err != nil {
			t.Fatalf("enqueue of a keyed event behind another as the producer: %v", err)
		}
		out, err := enqueue(lease.EnqueueOptions{SkipDuplicates: true}, lease.Event{Kind: "k", EventID: "plain"}, lease.Event{Kind: "k", EventID: "new"})
		if err != nil || !out[0].Duplicate || out[1].Duplicate || out[1].ID == 0 {
			t.Fatalf("enqueue skipping duplicates as the producer: %+v, %v; want plain a duplicate, new inserted", out, err)
		}
		if _, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "plain"}); !errors.Is(err, leasework.ErrDuplicateEvent) {
			t.Fatalf("enqueue of a duplicate as the producer: %v; want ErrDuplicateEvent", err)
		}
		for id, want := range map[string]leasework.Status{
			"plain": leasework.StatusReady, "meta": leasework.StatusReady, "new": leasework.StatusReady,
			"first": leasework.StatusReady, "second": leasework.StatusWaiting,
		} {
			r, err := s.GetByEventID(ctx, id)
			if err != nil || r.Status != want {
				t.Errorf("%s: %s, %v; want %s", id, r.Status, err, want)
			}
		}
		if r, _ := s.GetByEventID(ctx, "meta"); r.Metadata["tenant"] != "acme" {
			t.Errorf("metadata stored by the producer: %v; want tenant acme", r.Metadata)
		}

		// Events of a fair queue's partitions bring their partitions'
		// arrivals, written with the owner's rights: no grant on the
		// tables of fair scheduling. The function that writes them,
		// called by the producer itself for a partition no row of the
		// queue has, writes none.
		if _, err := s.SetWeight(ctx, lease.Weight{Queue: "fair", Weight: 1}, "test"); err != nil {
			t.Fatal(err)
		}
		fairOne, err := enqueue(lease.EnqueueOptions{}, lease.Event{Kind: "k", EventID: "fair-one", Queue: "fair", Partition: "acme"})
		if err != nil {
			t.Fatalf("enqueue of an event of a fair queue's partition as the producer: %v", err)
		}
		if _, err := enqueue(lease.EnqueueOptions{SkipDuplicates: true},
			lease.Event{Kind: "k", EventID: "fair-a", Queue: "fair", Partition: "acme"},
			lease.Event{Kind: "k", EventID: "fair-b", Queue: "fair", Partition: "globex"},
		); err != nil {
			t.Fatalf("enqueue of events of a fair queue's partitions as the producer: %v", err)
		}
		arriveMany := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_fair_arrive_many")
		if _, err := producerDB.ExecContext(ctx, `SELECT `+arriveMany+`(ARRAY[$1::bigint], ARRAY['fair'], ARRAY['nobody'], ARRAY[now()])`,
			fairOne[0].ID); err != nil {
			t.Errorf("the producer calling %s: %v; want it to run, and write nothing", arriveMany, err)
		}
		var arrivals string
		if err := admin.QueryRowContext(ctx, `SELECT COALESCE(string_agg(partition || ' ' || n, ', ' ORDER BY partition), '')
			FROM (SELECT partition, count(*) AS n FROM `+lease.QuoteIdent(s.Schema())+"."+lease.QuoteIdent(s.Table()+"_fair_arrivals")+`
			      WHERE queue = 'fair' GROUP BY partition) AS a`).Scan(&arrivals); err != nil {
			t.Fatal(err)
		}
		if want := "acme 2, globex 1"; arrivals != want {
			t.Errorf("arrivals of the fair queue's partitions, by the producer's enqueues: %q; want %q", arrivals, want)
		}

		if _, err := ps.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute}); drv.SQLState(err) != "42501" {
			t.Errorf("claim as the producer: %v (SQLSTATE %q); want insufficient_privilege, 42501", err, drv.SQLState(err))
		}
		schema := lease.QuoteIdent(s.Schema())
		for _, q := range []string{
			"SELECT payload FROM " + s.QualifiedTable(),
			"DELETE FROM " + s.QualifiedTable(),
			"UPDATE " + s.QualifiedTable() + " SET generation = generation + 1",
			"INSERT INTO " + schema + "." + lease.QuoteIdent(s.Table()+"_queues") + " (queue) VALUES ('q')",
			"SELECT count(*) FROM " + schema + "." + lease.QuoteIdent(s.Table()+"_migrations"),
			"CREATE TABLE " + schema + ".intruder (x int)",
		} {
			_, err := producerDB.ExecContext(ctx, q)
			if got := drv.SQLState(err); got != "42501" {
				t.Errorf("as the producer, %s: %v (SQLSTATE %q); want insufficient_privilege, 42501", q, err, got)
			}
		}
	})
}
