package pgserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Port is the TCP port the server listens on, on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// StartStandby makes a streaming-replication standby of primary: a base
// backup taken with pg_basebackup -R (the standby's settings point at the
// primary), started on a port of its own with opts' settings, and
// returned once it accepts read-only queries. It retries the WAL source
// every 100 ms (wal_retrieve_retry_interval), so that a promotion or a
// primary's restart is followed at once.
//
// A standby counts for the primary's synchronous_standby_names only once
// the primary names it: see [Server.RequireSyncStandby].
func StartStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp(tempBase(primary.cred != nil), "leasework-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s := &Server{dir: dir, bin: primary.bin, cred: primary.cred}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fail(fmt.Errorf("pgserver: %w", err))
		}
	}
	if err := s.copyOf(ctx, primary); err != nil {
		return fail(err)
	}
	if s.port, err = freePort(); err != nil {
		return fail(err)
	}
	if err := s.setArgs(opts); err != nil {
		return fail(err)
	}
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	if err := s.launch(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Rejoin makes s, a server stopped or crashed, a standby of primary on
// its own port, as an old primary rejoins its cluster after a failover:
// its data is replaced by a new base backup of primary (what pg_rewind
// would keep, a test need not), and it keeps opts' settings.
func (s *Server) Rejoin(ctx context.Context, primary *Server, opts Options) error {
	if s.cmd != nil && !s.exited() {
		return errors.New("pgserver: rejoin: the server is running; halt or crash it first")
	}
	if err := os.RemoveAll(filepath.Join(s.dir, "data")); err != nil {
		return fmt.Errorf("pgserver: rejoin: %w", err)
	}
	if err := s.copyOf(ctx, primary); err != nil {
		return err
	}
	if err := s.setArgs(opts); err != nil {
		return err
	}
	return s.launch(ctx)
}

// copyOf takes a base backup of primary into s's data directory, with the
// settings of a standby that follows it (-R).
func (s *Server) copyOf(ctx context.Context, primary *Server) error {
	// A fast checkpoint: the default spread one makes the copy wait for
	// minutes on an idle primary.
	backup := exec.CommandContext(ctx, filepath.Join(s.bin, "pg_basebackup"), "-D", filepath.Join(s.dir, "data"), "-R",
		"-X", "stream", "-c", "fast", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := backup.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: pg_basebackup: %w\n%s", err, out)
	}
	return nil
}

// setArgs sets the command line of a standby on s's directory and port.
func (s *Server) setArgs(opts Options) (err error) {
	s.args, err = s.commandLine(opts, "-c", "hot_standby=on", "-c", "wal_retrieve_retry_interval=100ms")
	return err
}

// RequireSyncStandby makes commits on s wait for standbys (remote flush):
// with names "*", for any one standby. It waits until some standby
// streams, so that the first commit after it does not hang on a standby
// still connecting; with names "" it makes commits asynchronous again.
func (s *Server) RequireSyncStandby(ctx context.Context, names string) error {
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer db.Close()
	if names != "" {
		if err := waitFor(ctx, db, "a standby to stream", "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'"); err != nil {
			return err
		}
	}
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_standby_names = " + quoteLiteral(names),
		"ALTER SYSTEM SET synchronous_commit = 'on'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("pgserver: %s: %w", q, err)
		}
	}
	if names == "" {
		return nil
	}
	return waitFor(ctx, db, "a synchronous standby", "SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')")
}

// CaughtUp waits until every standby of s has replayed all WAL s wrote
// before the call.
func (s *Server) CaughtUp(ctx context.Context) error {
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer db.Close()
	var lsn string
	if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return waitFor(ctx, db, "the standbys to replay "+lsn,
		"SELECT count(*) > 0 AND bool_and(replay_lsn >= '"+lsn+"'::pg_lsn) FROM pg_stat_replication")
}

// Promote ends recovery on a standby (pg_promote) and returns once it
// accepts writes, on a new timeline.
func (s *Server) Promote(ctx context.Context) error {
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer db.Close()
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_promote(true, 180)").Scan(&ok); err != nil {
		return fmt.Errorf("pgserver: promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("pgserver: promote: the standby did not leave recovery within 180s")
	}
	return nil
}

// waitFor polls query, which returns one boolean, until it is true.
func waitFor(ctx context.Context, db *sql.DB, what, query string) error {
	ctx, cancel := context.WithTimeout(ctx, startBound)
	defer cancel()
	for {
		var ok bool
		err := db.QueryRowContext(ctx, query).Scan(&ok)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
