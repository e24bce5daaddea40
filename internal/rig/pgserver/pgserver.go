// Package pgserver starts a throwaway PostgreSQL cluster from the local
// server binaries, for tests and for the examples' "no DSN given" default.
//
// The cluster lives in a temporary directory, listens on a free port of
// 127.0.0.1 only, trusts local connections, and is removed by [Server.Stop].
// initdb refuses to run as root, so as root the cluster runs as the
// unprivileged "postgres" user, which owns the directory.
package pgserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // to wait for the server to accept queries
)

// EnvDSN names the environment variable that points tests, examples and the
// CLI at an existing server instead of a throwaway one.
const EnvDSN = "LEASEWORK_DSN"

// Server is a running throwaway cluster.
type Server struct {
	dsn  string
	dir  string              // the cluster's directory: data, socket, log
	bin  string              // where the server binaries are
	cred *syscall.Credential // the server's user; nil: this process's
	port int
	args []string // postgres's command line, for a restart
	cmd  *exec.Cmd
	done chan error
}

// DSN is the URL of the cluster's "postgres" database as the "postgres"
// superuser.
func (s *Server) DSN() string { return s.dsn }

// PID is the process id of the server's postmaster; its backends are its
// children.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// FindBinaries returns the directory holding initdb and postgres: initdb's
// on PATH first (links followed), then the newest /usr/lib/postgresql/*/bin.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Follow a link on PATH to the directory of the other binaries
		// (pg_basebackup, say), which may not be linked beside it.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("pgserver: PostgreSQL server binaries (initdb, postgres) are not on PATH nor under /usr/lib/postgresql/*/bin; " +
		"install the server (on Debian or Ubuntu: apt-get install postgresql) or set " + EnvDSN + " to an existing server")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Options tune a throwaway cluster.
type Options struct {
	// Durable keeps fsync and synchronous commit on, as a real server has
	// them. Benchmarks need it; tests and examples run faster without.
	Durable bool

	// Settings are extra server settings, each "name=value", passed as
	// -c options (say "shared_preload_libraries=pg_stat_statements").
	Settings []string
}

// Start initializes and starts a throwaway cluster for tests and examples
// (fsync off). Stop it with [Server.Stop].
func Start(ctx context.Context) (*Server, error) { return StartWith(ctx, Options{}) }

// StartWith is [Start] with options.
func StartWith(ctx context.Context, opts Options) (*Server, error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tempBase(cred != nil), "leasework-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s := &Server{dir: dir}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("pgserver: %w", err))
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgserver: initdb: %w\n%s", err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	s.bin, s.cred, s.port = bin, cred, port
	if s.args, err = s.commandLine(opts); err != nil {
		return fail(err)
	}
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.launch(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// commandLine is postgres's command line for s's directory and port, with
// opts and extra arguments. A later -c of a name wins over an earlier one,
// so opts.Settings override the defaults.
func (s *Server) commandLine(opts Options, extra ...string) ([]string, error) {
	args := []string{"-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}
	args = append(args, extra...)
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, set := range opts.Settings {
		if !strings.Contains(set, "=") {
			return nil, fmt.Errorf("pgserver: setting %q is not name=value", set)
		}
		args = append(args, "-c", set)
	}
	return args, nil
}

// launch starts postgres with s.args and waits until it accepts queries.
// On failure the server is stopped and the error carries its log.
func (s *Server) launch(ctx context.Context) error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer logFile.Close()
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Pdeathsig stops the server if this process dies without Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	if err := s.waitReady(ctx); err != nil {
		s.shutdown(syscall.SIGINT)
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		return fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	return nil
}

// startBound bounds a server's start-up, and pingBound each attempt to
// reach it meanwhile: liveness bounds for a loaded machine, where a new
// backend can take seconds to fork and answer. A server that is not up yet
// refuses at once, so a generous pingBound costs nothing on an idle one.
const (
	startBound = 3 * time.Minute
	pingBound  = 15 * time.Second
	stopBound  = 2 * time.Minute
)

// waitReady waits until the server accepts queries.
func (s *Server) waitReady(ctx context.Context) error {
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer db.Close()
	deadline := time.Now().Add(startBound)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, pingBound)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case exitErr := <-s.done:
			s.done <- exitErr
			return fmt.Errorf("pgserver: postgres exited during start-up: %v", exitErr)
		case <-ctx.Done():
			return fmt.Errorf("pgserver: waiting for postgres: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgserver: postgres did not accept connections within %v: %v", startBound, err)
		}
	}
}

// Stop shuts the server down (fast shutdown) and removes its directory.
func (s *Server) Stop() error {
	err := s.shutdown(syscall.SIGINT)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("pgserver: %w", rmErr)
	}
	return err
}

// Restart shuts the server down (fast shutdown: open connections are
// ended) and starts it again on the same port and data, as an operator's
// restart does. It returns once the server accepts queries again.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.shutdown(syscall.SIGINT); err != nil {
		return err
	}
	return s.launch(ctx)
}

// Crash kills the postmaster and every backend with SIGKILL, as a machine
// that loses power would: no process of the server says goodbye to its
// clients, and the data directory stays as it was. [Server.Start] runs
// crash recovery on it; [Server.Stop] still removes it.
func (s *Server) Crash() error {
	if s.cmd == nil || s.cmd.Process == nil || s.exited() {
		return errors.New("pgserver: crash: the server is not running")
	}
	pid := s.cmd.Process.Pid
	// Each backend runs in a session of its own, outside the postmaster's
	// process group: stop the postmaster so that it starts no other, kill
	// its children, then kill it.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgserver: crash: %w", err)
	}
	backends := children(pid)
	for _, child := range backends {
		syscall.Kill(child, syscall.SIGKILL)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgserver: crash: %w", err)
	}
	err := <-s.done
	s.done <- err
	// A killed process takes a moment to exit: return once none runs.
	deadline := time.Now().Add(time.Minute)
	for _, child := range backends {
		for alive(child) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgserver: crash: process %d of the server still runs a minute after SIGKILL", child)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}

// children returns the ids of the processes whose parent is pid, read from
// /proc.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // it exited
		}
		// The parent's id is the second field after the parenthesized
		// command name, which may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, child)
		}
	}
	return out
}

// Halt shuts the server down (fast shutdown) and keeps its data, for a
// later [Server.Start].
func (s *Server) Halt() error { return s.shutdown(syscall.SIGINT) }

// Start starts a server that was halted or crashed, on the same port and
// data, and returns once it accepts queries.
func (s *Server) Start(ctx context.Context) error {
	if s.cmd != nil && !s.exited() {
		return errors.New("pgserver: start: the server is running")
	}
	return s.launch(ctx)
}

// exited reports whether the running postmaster has exited.
func (s *Server) exited() bool {
	select {
	case err := <-s.done:
		s.done <- err
		return true
	default:
		return false
	}
}

// shutdown stops the postmaster with sig (SIGINT: fast shutdown) and waits
// for it, killing it after stopBound (a liveness bound: a fast shutdown
// takes a second on an idle machine).
func (s *Server) shutdown(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil || s.exited() {
		return nil
	}
	s.cmd.Process.Signal(sig)
	select {
	case err := <-s.done:
		s.done <- err
		return nil
	case <-time.After(stopBound):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		err := <-s.done
		s.done <- err
		return fmt.Errorf("pgserver: postgres did not stop within %v; killed", stopBound)
	}
}

// serverUser returns the credential to run the server with: nil when not
// root, the "postgres" user when root.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New(`pgserver: running as root, and initdb refuses root; no "postgres" user exists to run the server as ` +
			"(installing the postgresql package creates it), or set " + EnvDSN)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempBase is where the cluster's directory goes: the usual temporary
// directory, unless the server runs as another user who could not reach it
// (a private $TMPDIR of root's), then /tmp.
func tempBase(otherUser bool) string {
	base := os.TempDir()
	if !otherUser {
		return base
	}
	for dir := base; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if dir == filepath.Dir(dir) {
			return base
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Resolve returns the DSN to use: explicit if given, else $LEASEWORK_DSN, else
// a throwaway cluster started now (stop is then non-nil and must be called).
// It is the examples' default; when the server binaries are missing and it
// runs as root on a system with apt-get, it installs the postgresql package
// first. Tests use pgtest instead, which never installs anything.
func Resolve(ctx context.Context, explicit string) (dsn string, stop func() error, err error) {
	dsn, srv, err := ResolveWith(ctx, explicit, Options{})
	if srv != nil {
		stop = srv.Stop
	}
	return dsn, stop, err
}

// ResolveWith is [Resolve] with options for the throwaway cluster. It returns
// the cluster when it started one (stop it with [Server.Stop]), nil when
// the DSN came from explicit or $LEASEWORK_DSN.
func ResolveWith(ctx context.Context, explicit string, opts Options) (dsn string, srv *Server, err error) {
	if explicit = strings.TrimSpace(explicit); explicit != "" {
		return explicit, nil, nil
	}
	if env := strings.TrimSpace(os.Getenv(EnvDSN)); env != "" {
		return env, nil, nil
	}
	if _, err := FindBinaries(); err != nil {
		if installErr := install(ctx); installErr != nil {
			return "", nil, fmt.Errorf("%w\n(installing it failed: %v)", err, installErr)
		}
	}
	s, err := StartWith(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	return s.DSN(), s, nil
}

// install installs Debian's postgresql package, for the examples' first run
// on a fresh machine. It does so only as root with apt-get at hand, and says
// so on stderr.
func install(ctx context.Context) error {
	apt, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return errors.New("not root with apt-get; install the server yourself")
	}
	fmt.Fprintln(os.Stderr, "no PostgreSQL server binaries and no "+EnvDSN+": installing the postgresql package with apt-get")
	for _, args := range [][]string{{"update", "-q"}, {"install", "-y", "-q", "--no-install-recommends", "postgresql"}} {
		cmd := exec.CommandContext(ctx, apt, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	return nil
}
