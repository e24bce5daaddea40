package lease_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// waitsEnv runs TestMigrationWaits, a measurement that takes minutes.
const waitsEnv = "LEASEWORK_MIGRATION_LOCKS"

// TestMigrationWaits measures, for each migration applied by Migrate to a
// table of 1,000,000 DONE rows and some live ones, how long a primary-key
// read and an insert wait while it runs: the longest of each, probed one
// after the other on connections of their own from before the step starts
// until it ends. A last row applies every step from migration 4 on in one
// call, to a second such table at version 3, as an upgrade would. It prints
// figures and asserts none of them: LEASEWORK_MIGRATION_LOCKS=1 runs it
// (with LEASEWORK_DSN, on the server named).
func TestMigrationWaits(t *testing.T) {
	if os.Getenv(waitsEnv) != "1" {
		t.Skip("a measurement of minutes, run only with " + waitsEnv + "=1")
	}
	const history = 1_000_000
	ctx := context.Background()
	ms := lease.Migrations()

	s, live := tableWithHistory(t, ms, 1, history)
	idle := probeWhile(t, s, live, func() error { time.Sleep(2 * time.Second); return nil })
	t.Logf("%d DONE rows; live rows: %d READY (a third keyed), 100 INPROGRESS, 100 FAILED", history, 1000)
	t.Logf("%-34s %10s %16s %16s", "migration", "took", "read: longest", "insert: longest")
	t.Logf("%-34s %10s %16s %16s", "(none: 2 s idle)", "", idle.reads.String(), idle.inserts.String())
	for i := 1; i < len(ms); i++ {
		var applied []int
		var took time.Duration
		w := probeWhile(t, s, live, func() (err error) {
			start := time.Now()
			applied, err = lease.MigrateWith(ctx, s, ms[:i+1])
			took = time.Since(start)
			return err
		})
		if !slices.Equal(applied, []int{ms[i].Version}) {
			t.Fatalf("migration %d: applied %v", ms[i].Version, applied)
		}
		t.Logf("%-34s %10v %16s %16s", fmt.Sprintf("%d %s", ms[i].Version, ms[i].Name), took.Round(time.Millisecond), w.reads.String(), w.inserts.String())
	}

	from := 3
	up, live := tableWithHistory(t, ms, from, history)
	var applied []int
	var took time.Duration
	w := probeWhile(t, up, live, func() (err error) {
		start := time.Now()
		applied, err = up.Migrate(ctx)
		took = time.Since(start)
		return err
	})
	t.Logf("%-34s %10v %16s %16s", fmt.Sprintf("%d..%d in one Migrate", from+1, ms[len(ms)-1].Version), took.Round(time.Millisecond), w.reads.String(), w.inserts.String())
	if len(applied) != len(ms)-from {
		t.Fatalf("upgrade from %d applied %v", from, applied)
	}
}

// tableWithHistory makes a table at version v (of ms) holding history DONE
// rows, a tenth of them keyed, and live rows: 1000 READY (a third keyed,
// three to a key), 100 INPROGRESS with a lease, 100 FAILED. It returns the
// store and the id of a READY row.
func tableWithHistory(t *testing.T, ms []lease.Migration, v, history int) (*lease.Store, int64) {
	t.Helper()
	ctx := context.Background()
	s, err := lease.New(pgtest.Open(t, pgtest.Drivers[0].New()), pgtest.Drivers[0].New(), lease.Options{Schema: pgtest.SchemaName()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DropSchema(context.Background()) })
	if _, err := lease.MigrateWith(ctx, s, ms[:v]); err != nil {
		t.Fatal(err)
	}
	tbl := s.QualifiedTable()
	for _, q := range []string{
		`INSERT INTO ` + tbl + ` (event_id, kind, key, status, attempt, finished_at)
		 SELECT 'h' || g, 'k', CASE WHEN g % 10 = 0 THEN 'hk' || (g % 5000) END, 'DONE', 1,
		        statement_timestamp() - interval '1 second' * (1000000 - g)
		 FROM generate_series(1, ` + fmt.Sprint(history) + `) AS g`,
		`INSERT INTO ` + tbl + ` (event_id, kind, key)
		 SELECT 'r' || g, 'k', CASE WHEN g % 3 = 0 THEN 'lk' || (g % 333) END FROM generate_series(1, 1000) AS g`,
		`INSERT INTO ` + tbl + ` (event_id, kind, status, generation, attempt, lease_until)
		 SELECT 'p' || g, 'k', 'INPROGRESS', 1, 1, statement_timestamp() + interval '1 hour' FROM generate_series(1, 100) AS g`,
		`INSERT INTO ` + tbl + ` (event_id, kind, status, attempt, last_error, finished_at)
		 SELECT 'f' || g, 'k', 'FAILED', 1, 'boom', statement_timestamp() FROM generate_series(1, 100) AS g`,
		`VACUUM ANALYZE ` + tbl,
	} {
		if v >= 5 && strings.HasPrefix(q, "VACUUM") {
			ids := lease.QuoteIdent(s.Schema()) + "." + lease.QuoteIdent(s.Table()+"_event_ids")
			if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+ids+` (event_id, id) SELECT event_id, id FROM `+tbl); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var id int64
	if err := s.DB().QueryRowContext(ctx, `SELECT min(id) FROM `+tbl+` WHERE status = 'READY'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return s, id
}

// probeStats is what one kind of probe saw.
type probeStats struct {
	n       int
	longest time.Duration
}

func (p probeStats) String() string {
	return fmt.Sprintf("%v (%d)", p.longest.Round(100*time.Microsecond), p.n)
}

type waits struct{ reads, inserts probeStats }

// probeWhile runs step while reading the row id by its primary key and
// inserting rows, one statement after another on a connection of each,
// and returns what the probes saw. The probes start before step and end
// when it has returned.
func probeWhile(t *testing.T, s *lease.Store, id int64, step func() error) waits {
	t.Helper()
	ctx := context.Background()
	stop := make(chan struct{})
	var w waits
	var wg sync.WaitGroup
	probe := func(into *probeStats, q func(c *sql.Conn, i int) error) {
		c, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		wg.Go(func() {
			defer c.Close()
			for i := 0; ; i++ {
				begin := time.Now()
				err := q(c, i)
				if i == 0 {
					close(started)
				}
				if err != nil {
					t.Errorf("probe: %v", err)
					return
				}
				into.n++
				into.longest = max(into.longest, time.Since(begin))
				select {
				case <-stop:
					return
				default:
				}
			}
		})
		<-started
	}
	tag := pgtest.SchemaName()
	probe(&w.reads, func(c *sql.Conn, _ int) error {
		var status string
		return c.QueryRowContext(ctx, `SELECT status FROM `+s.QualifiedTable()+` WHERE id = $1`, id).Scan(&status)
	})
	probe(&w.inserts, func(c *sql.Conn, i int) error {
		_, err := c.ExecContext(ctx, `INSERT INTO `+s.QualifiedTable()+` (event_id, kind) VALUES ($1, 'probe')`, fmt.Sprintf("%s-%d", tag, i))
		return err
	})
	err := step()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return w
}
