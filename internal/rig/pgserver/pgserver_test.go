package pgserver

import (
	"context"
	"database/sql"
	"testing"
)

func query(t *testing.T, dsn, q string, dest ...any) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if len(dest) == 0 {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return
	}
	if err := db.QueryRow(q).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// A restart keeps the data and the port; a connection open across it is
// ended by the fast shutdown.
func TestRestartKeepsDataAndPort(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	query(t, s.DSN(), "CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
	db, err := sql.Open("pgx", s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.PingContext(ctx); err == nil {
		t.Error("a connection opened before the restart still answers; want it ended")
	}
	var v int
	query(t, s.DSN(), "SELECT v FROM t", &v)
	if v != 7 {
		t.Errorf("after restart: v = %d; want 7", v)
	}
}

// A synchronous standby has every commit the primary acknowledged before
// it crashed, and once promoted it writes on timeline 2.
func TestStandbyPromotedAfterPrimaryCrash(t *testing.T) {
	ctx := context.Background()
	primary, err := StartWith(ctx, Options{Settings: []string{"synchronous_commit=on"}})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	standby, err := StartStandby(ctx, primary, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	if err := primary.RequireSyncStandby(ctx, "*"); err != nil {
		t.Fatal(err)
	}
	query(t, primary.DSN(), "CREATE TABLE t (v int); INSERT INTO t SELECT generate_series(1, 1000)")
	backends := children(primary.PID())
	if len(backends) == 0 {
		t.Fatal("the primary's postmaster has no child processes")
	}
	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range backends {
		if alive(pid) {
			t.Errorf("process %d of the crashed server is alive after Crash returned", pid)
		}
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	var timeline string
	query(t, standby.DSN(), "SELECT count(*) FROM t", &n)
	query(t, standby.DSN(), "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)", &timeline)
	if n != 1000 || timeline != "00000002" {
		t.Errorf("promoted standby: %d rows on timeline %s; want 1000 on 00000002", n, timeline)
	}
}
