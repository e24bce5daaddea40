//go:build autofailover

package failover

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasework/leasework/internal/rig/pgserver"
)

// autoCluster is a pg_auto_failover formation on loopback ports: a monitor
// and data nodes, each run by a keeper (pg_autoctl) that supervises its
// own postgres. Every process of a node works in the node's directory
// (postgres in its data directory), which is how the test finds them all
// to crash a node, and to make sure none outlives the test.
type autoCluster struct {
	autoctl string              // pg_autoctl
	bin     string              // the PostgreSQL server binaries
	cred    *syscall.Credential // the nodes' user; nil: this process's
	dir     string              // everything the cluster writes
	sockets string              // every node's Unix socket
	ports   []int               // free ports, taken by the nodes in turn
	monitor *autoNode
	all     []*autoNode // the monitor and the data nodes, in their order of creation
	keepers []keeper    // every keeper started, running or not
	db      *sql.DB     // the monitor's database
}

// keeper is a pg_autoctl process supervising a node.
type keeper struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// autoNode is the monitor or a data node.
type autoNode struct {
	name string
	dir  string // HOME, XDG directories, data directory and pg_autoctl's log
	port int
}

func (n *autoNode) pgdata() string { return filepath.Join(n.dir, "pgdata") }

// autoFailoverPrerequisites fails the test when pg_autoctl or the
// monitor's extension is missing. It returns pg_autoctl's path and the
// server binaries' directory.
func autoFailoverPrerequisites(t *testing.T) (autoctl, bin string) {
	t.Helper()
	const install = "install Debian's postgresql-15-auto-failover and pg-auto-failover-cli packages " +
		"(apt-get install postgresql-15-auto-failover pg-auto-failover-cli)"
	autoctl, err := exec.LookPath("pg_autoctl")
	if err != nil {
		t.Fatalf("pg_autoctl is not on PATH: %s", install)
	}
	if bin, err = pgserver.FindBinaries(); err != nil {
		t.Fatal(err)
	}
	// The monitor is a server with the pgautofailover extension, which is
	// built for one major version.
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--sharedir", "--version").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		control := filepath.Join(lines[0], "extension", "pgautofailover.control")
		if _, err := os.Stat(control); err != nil && len(lines) == 2 {
			major, _, _ := strings.Cut(strings.TrimPrefix(lines[1], "PostgreSQL "), ".")
			t.Fatalf("the PostgreSQL server in %s has no pgautofailover extension (%s): install Debian's postgresql-%s-auto-failover package",
				bin, control, major)
		}
	}
	return autoctl, bin
}

// newAutoCluster prepares a cluster's directory and ports, with a cleanup
// that stops every process of the cluster and removes its directory. It
// starts nothing.
func newAutoCluster(t *testing.T, autoctl, bin string) *autoCluster {
	t.Helper()
	c := &autoCluster{autoctl: autoctl, bin: bin}
	if os.Geteuid() == 0 {
		// initdb refuses root: the nodes run as postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf(`running as root, and initdb refuses root; no "postgres" user exists to run the nodes as: %v`, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// The nodes' user must reach the directory: a temporary directory of
	// root's own may be closed to others.
	base := os.TempDir()
	if c.cred != nil {
		for dir := base; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
				base = "/tmp"
				break
			}
		}
	}
	dir, err := os.MkdirTemp(base, "leasework-paf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t, dir) })
	// As the processes' working directories read in /proc: links resolved.
	if c.dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatal(err)
	}
	c.sockets = c.mkdir(t, "sockets")

	// The ports, distinct, each free a moment ago.
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c.ports = append(c.ports, l.Addr().(*net.TCPAddr).Port)
	}
	return c
}

// mkdir makes a directory in the cluster's, owned by the nodes' user.
func (c *autoCluster) mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	dir := filepath.Join(append([]string{c.dir}, parts...)...)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for d := dir; c.cred != nil; d = filepath.Dir(d) {
		if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
		if d == c.dir {
			break
		}
	}
	return dir
}

// newNode makes a node's directories and gives it the next port.
func (c *autoCluster) newNode(t *testing.T, name string) *autoNode {
	t.Helper()
	n := &autoNode{name: name, dir: c.mkdir(t, name), port: c.ports[0]}
	c.ports = c.ports[1:]
	for _, sub := range []string{"home", "config", "data", "run"} {
		c.mkdir(t, name, sub)
	}
	c.all = append(c.all, n)
	return n
}

// command is a command run as the nodes' user in n's directory, with n's
// own HOME and XDG directories (where pg_autoctl keeps its configuration
// and state) and nothing else from this process's environment: $PGHOST
// points at the cluster's socket directory.
func (c *autoCluster) command(ctx context.Context, n *autoNode, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = n.dir
	cmd.Env = []string{
		"PATH=" + c.bin + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + filepath.Join(n.dir, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(n.dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(n.dir, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(n.dir, "run"),
		"PGHOST=" + c.sockets,
		"PGUSER=postgres",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	return cmd
}

// run runs a command to its end, within two minutes.
func (c *autoCluster) run(t *testing.T, n *autoNode, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.command(ctx, n, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// initdb makes n's data directory, with the settings every node of the
// cluster shares. pg_autoctl starts postgres with its port and listen
// address on the command line, and puts its own settings and tuning in an
// included file; postgresql.auto.conf is read after both, and the
// standbys' base backups copy it.
func (c *autoCluster) initdb(t *testing.T, n *autoNode) {
	t.Helper()
	c.run(t, n, filepath.Join(c.bin, "initdb"), "-D", n.pgdata(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	settings := fmt.Sprintf(`
# The cluster's sockets stay in its directory: pg_autoctl connects through
# the directory $PGHOST names, and gives postgres no socket directory.
unix_socket_directories = '%s'
# The workers' pools open many connections.
max_connections = 300
# pg_autoctl's tuning gives each node a quarter of the machine's memory;
# three nodes share this machine.
shared_buffers = '128MB'
`, c.sockets)
	auto := filepath.Join(n.pgdata(), "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(settings); err != nil {
		t.Fatal(err)
	}
}

// startKeeper starts pg_autoctl as n's keeper, logging to n's
// pg_autoctl.log. The keeper gets SIGTERM, which stops its postgres, if
// this process dies first (a test binary's timeout runs no cleanup).
func (c *autoCluster) startKeeper(t *testing.T, n *autoNode, args ...string) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "pg_autoctl.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := c.command(context.Background(), n, c.autoctl, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := keeper{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(k.exited) }()
	c.keepers = append(c.keepers, k)
}

// startMonitor creates the monitor and runs it, with health checks and
// timeouts lowered so that a crashed primary is replaced in seconds, not in
// the minute the defaults take. A primary given a second to demote itself
// may still be running when its secondary is promoted; it acknowledges no
// commit meanwhile, as its commits wait for that secondary.
func (c *autoCluster) startMonitor(t *testing.T) {
	t.Helper()
	m := c.newNode(t, "monitor")
	c.initdb(t, m)
	c.run(t, m, c.autoctl, "create", "monitor", "--pgdata", m.pgdata(), "--pgport", strconv.Itoa(m.port),
		"--pgctl", filepath.Join(c.bin, "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
	// The monitor listens on every address unless told otherwise, and
	// create monitor has no option for it.
	c.run(t, m, c.autoctl, "config", "set", "--pgdata", m.pgdata(), "postgresql.listen_addresses", "127.0.0.1")
	c.startKeeper(t, m, "run", "--pgdata", m.pgdata())
	c.monitor = m
	db, err := sql.Open("pgx", nodeDSN(m.port, "pg_auto_failover"))
	if err != nil {
		t.Fatal(err)
	}
	c.db = db
	waitUntil(t, "the monitor to accept connections", func() bool { return db.Ping() == nil })
	for _, set := range []string{
		"health_check_period = 500",                // ms; 5 s by default
		"health_check_timeout = 500",               // ms; 5 s
		"health_check_max_retries = 1",             // 2
		"health_check_retry_delay = 200",           // ms; 2 s
		"node_considered_unhealthy_timeout = 2000", // ms; 20 s: how long a node's keeper may go without reporting
		"primary_demote_timeout = 1000",            // ms; 30 s: how long a primary that does not answer is given to demote itself
		"startup_grace_period = 1000",              // ms; 10 s
	} {
		if _, err := db.Exec("ALTER SYSTEM SET pgautofailover." + set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the monitor to read its new settings", func() bool {
		var timeout string
		err := db.QueryRow("SELECT current_setting('pgautofailover.primary_demote_timeout')").Scan(&timeout)
		return err == nil && timeout == "1s"
	})
}

// monitorURI is how the nodes and pg_autoctl's commands reach the monitor.
func (c *autoCluster) monitorURI() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", c.monitor.port)
}

// addNode creates a data node and runs it: the first node of the
// formation becomes its primary, the next one a synchronous secondary of
// primary, through a base backup.
func (c *autoCluster) addNode(t *testing.T, name string, primary *autoNode) *autoNode {
	t.Helper()
	n := c.newNode(t, name)
	if primary == nil {
		c.initdb(t, n) // the secondaries' base backups copy its settings
	}
	c.startKeeper(t, n, "create", "postgres", "--pgdata", n.pgdata(), "--pgport", strconv.Itoa(n.port),
		"--pgctl", filepath.Join(c.bin, "pg_ctl"), "--listen", "127.0.0.1", "--hostname", "127.0.0.1",
		"--name", name, "--username", "postgres", "--dbname", "postgres",
		"--monitor", c.monitorURI(), "--auth", "trust", "--no-ssl", "--run")
	if primary == nil {
		c.waitStates(t, map[string]string{name: "single"})
		return n
	}
	c.waitSecondary(t, n, primary)
	return n
}

// waitSecondary waits until n is primary's secondary, and primary a
// primary again. Meanwhile it asks primary for a checkpoint now and then:
// pg_autoctl takes base backups without --checkpoint=fast, so they wait
// for a spread checkpoint, which an immediate one requested meanwhile ends
// at once.
func (c *autoCluster) waitSecondary(t *testing.T, n, primary *autoNode) {
	t.Helper()
	db, err := sql.Open("pgx", nodeDSN(primary.port, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, stop := context.WithCancel(context.Background())
	checkpoints := make(chan struct{})
	go func() {
		defer close(checkpoints)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			db.ExecContext(ctx, "CHECKPOINT") // fails while the primary restarts: no matter
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stop(); <-checkpoints }()
	c.waitStates(t, map[string]string{primary.name: "primary", n.name: "secondary"})
}

// states are the nodes' states as the monitor has them, reported and goal.
func (c *autoCluster) states() (string, map[string][2]string) {
	rows, err := c.db.Query("SELECT nodename, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid")
	if err != nil {
		return err.Error(), nil
	}
	defer rows.Close()
	var all []string
	states := map[string][2]string{}
	for rows.Next() {
		var name, reported, goal string
		if err := rows.Scan(&name, &reported, &goal); err != nil {
			return err.Error(), nil
		}
		states[name] = [2]string{reported, goal}
		all = append(all, fmt.Sprintf("%s %s (goal %s)", name, reported, goal))
	}
	if err := rows.Err(); err != nil {
		return err.Error(), nil
	}
	return strings.Join(all, ", "), states
}

// waitStates waits until each node named in want has reached its state:
// the monitor's goal for it, and what its keeper reports.
func (c *autoCluster) waitStates(t *testing.T, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		seen, states := c.states()
		reached := states != nil
		for name, state := range want {
			reached = reached && states[name] == [2]string{state, state}
		}
		if reached {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited two minutes for the nodes to reach %v; the monitor has: %s", want, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitWritable waits until n accepts writes: promoted, and no longer
// read-only (a node promoted while its old primary may still be running is
// read-only until the monitor has it demoted).
func (c *autoCluster) waitWritable(t *testing.T, n *autoNode) {
	t.Helper()
	db, err := sql.Open("pgx", nodeDSN(n.port, "postgres")+"&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitUntil(t, n.name+" to accept writes", func() bool {
		var writable bool
		err := db.QueryRow("SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'").Scan(&writable)
		return err == nil && writable
	})
}

// requireSync waits until commits on primary wait for a standby's flush,
// and returns its synchronous_standby_names.
func (c *autoCluster) requireSync(t *testing.T, primary *autoNode) string {
	t.Helper()
	db, err := sql.Open("pgx", nodeDSN(primary.port, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var names, commit string
	waitUntil(t, "synchronous replication on "+primary.name, func() bool {
		err := db.QueryRow(`SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')
			WHERE EXISTS (SELECT FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))`).Scan(&names, &commit)
		return err == nil && names != ""
	})
	if commit != "on" && commit != "remote_apply" {
		t.Fatalf("%s has synchronous_commit = %s: a commit may return before a standby has it", primary.name, commit)
	}
	return names
}

// crash kills every process of n at once with SIGKILL: its keeper, the
// keeper's services, postgres and its backends (which are each in a
// session of their own), as a machine that loses power would. It returns
// how many there were.
func (c *autoCluster) crash(t *testing.T, n *autoNode) int {
	t.Helper()
	killed, left := killAll(n.dir)
	if len(left) > 0 {
		t.Fatalf("processes %v of %s outlived SIGKILL", left, n.name)
	}
	return len(killed)
}

// performFailover starts a planned failover (a switchover) and returns
// its wait: pg_autoctl returns once the new primary is primary again.
func (c *autoCluster) performFailover(t *testing.T) (wait func()) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := c.command(ctx, c.monitor, c.autoctl, "perform", "failover", "--monitor", c.monitorURI())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		defer cancel()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("pg_autoctl perform failover: %v\n%s", err, out.Bytes())
		}
	}
}

// stop stops the keepers (each stops its postgres, fast shutdown), kills
// whatever of the cluster is left, and removes its directory, dir; a
// failed test gets the end of each node's pg_autoctl log first.
func (c *autoCluster) stop(t *testing.T, dir string) {
	if c.db != nil {
		c.db.Close()
	}
	for _, k := range c.keepers {
		k.cmd.Process.Signal(syscall.SIGTERM)
	}
	timeout := time.After(30 * time.Second)
	for _, k := range c.keepers {
		select {
		case <-k.exited:
		case <-timeout:
		}
	}
	if c.dir != "" {
		if _, left := killAll(c.dir); len(left) > 0 {
			t.Errorf("processes %v of the pg_auto_failover cluster outlived SIGKILL", left)
		}
	}
	if t.Failed() {
		for _, n := range c.all {
			log, err := os.ReadFile(filepath.Join(n.dir, "pg_autoctl.log"))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			t.Logf("the end of %s's pg_autoctl log:\n%s", n.name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Error(err)
	}
}

// killAll kills with SIGKILL every process working in dir or below, until
// none is left. It returns the processes it killed, and those still there
// after ten seconds.
func killAll(dir string) (killed, left []int) {
	deadline := time.Now().Add(10 * time.Second)
	seen := map[int]bool{}
	for {
		pids := processesIn(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return killed, pids
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
			if !seen[pid] {
				seen[pid] = true
				killed = append(killed, pid)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processesIn lists the processes whose working directory is dir or below
// it. A process that has exited has none, not even as a zombie.
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// nodeDSN is a URL of database db on the node at port, as postgres.
func nodeDSN(port int, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, db)
}
