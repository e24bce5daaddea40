package conformance_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	pqdriver "github.com/leasework/leasework/driver/pq"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// envSuiteTarget makes TestBaselineSelfTest run the suite itself, in a child
// process, against the store it names: "safe" or "baseline".
const envSuiteTarget = "LEASEWORK_SELFTEST_TARGET"

// TestBaselineSelfTest proves the suite can fail. It runs the lab's six
// tests in two child processes, one against the real store and one against
// the lab's unsafe baseline (baseline_test.go), and asserts the article's
// result: all six pass on the real store; on the baseline exactly four fail
// and two pass.
func TestBaselineSelfTest(t *testing.T) {
	switch os.Getenv(envSuiteTarget) {
	case "safe":
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t)})
		return
	case "baseline":
		conformance.Run(t, conformance.Target{Driver: pgxdriver.New(), DSN: pgtest.DSN(t), NewStore: newBaseline})
		return
	}

	safe, safeErr := runSuite(t, "safe")
	base, baseErr := runSuite(t, "baseline")

	var table strings.Builder
	fmt.Fprintf(&table, "%-40s %-6s %s\n", "test", "safe", "baseline")
	for _, name := range conformance.LabTests {
		fmt.Fprintf(&table, "%-40s %-6s %s\n", name, safe[name], base[name])
	}
	t.Logf("the lab's six tests, safe store and unsafe baseline:\n%s", table.String())

	wantBaseline := map[string]string{
		"ClaimThenComplete":                     "PASS",
		"UncommittedClaimIsSkippedThenRestored": "PASS",
		"KilledWorkerClaimIsRecovered":          "FAIL",
		"StaleOwnerCannotComplete":              "FAIL",
		"StaleOwnerCannotRetry":                 "FAIL",
		"ExpiredOwnerCannotFinalize":            "FAIL",
	}
	for _, name := range conformance.LabTests {
		if safe[name] != "PASS" {
			t.Errorf("%s on the safe store: %q, want PASS", name, safe[name])
		}
		if base[name] != wantBaseline[name] {
			t.Errorf("%s on the baseline: %q, want %s", name, base[name], wantBaseline[name])
		}
	}
	if safeErr != nil {
		t.Errorf("the suite against the safe store exited with %v, want success", safeErr)
	}
	var exit *exec.ExitError
	if !errors.As(baseErr, &exit) || exit.ExitCode() != 1 {
		t.Errorf("the suite against the baseline exited with %v, want exit status 1", baseErr)
	}
}

// runSuite runs the lab's six tests against target in a child process and
// returns each test's result.
func runSuite(t *testing.T, target string) (map[string]string, error) {
	t.Helper()
	results, _, err := runChild(t, "TestBaselineSelfTest", conformance.LabTests, envSuiteTarget+"="+target)
	return results, err
}

// runChild runs the subtests names of the test function test in a child
// process with env added to its environment and flags added to its
// command line, and returns each subtest's result, the child's output and
// how it exited.
func runChild(t *testing.T, test string, names []string, env string, flags ...string) (map[string]string, string, error) {
	t.Helper()
	pattern := "^" + test + "$/^(" + strings.Join(names, "|") + ")$"
	args := append([]string{"-test.run=" + pattern, "-test.v", "-test.count=1", "-test.timeout=5m"}, flags...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	results := map[string]string{}
	line := regexp.MustCompile(`--- (PASS|FAIL|SKIP): ` + test + `/(\w+)`)
	for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
		results[m[2]] = m[1]
	}
	if len(results) != len(names) {
		t.Fatalf("the run with %s reported %d of its %d subtests (%v); its output:\n%s", env, len(results), len(names), err, out.String())
	}
	return results, out.String(), err
}

// envFactory makes TestTargetOpenDB run the suite itself, in a child
// process, through the pool factory of the driver it names: "pgx" or "pq".
const envFactory = "LEASEWORK_FACTORY_TARGET"

// factoryTests are the properties TestTargetOpenDB runs through a factory:
// among them the kill test, whose own child process opens a pool, and the
// notification properties, which need the driver to listen on the
// factory's pool.
var factoryTests = []string{
	"ClaimThenComplete",
	"KilledWorkerClaimIsRecovered",
	"CancelledAttemptCannotWriteAnything",
	"SnoozeIsGuardedAndSparesTheBudget",
	"NotifyOnCommit",
	"PromotionNotifiesAtCommit",
}

var (
	// factoryLine is what the factories print each time they open a pool.
	factoryLine = regexp.MustCompile(`LEASEWORK-FACTORY pid=(\d+)\b`)
	// killedLine is what the kill test logs of the child it killed.
	killedLine = regexp.MustCompile(`child (\d+) died of SIGKILL`)
)

// TestTargetOpenDB runs properties of the suite with Target.OpenDB set, in
// a child process per driver: through a pool that stdlib.OpenDB makes of a
// pgx ConnConfig of the test's own, and through a pool on lib/pq's own
// connector. The Driver refuses Open there, so a pool the suite opened any
// other way fails its subtest; each factory prints a line per pool it
// opens, and the test counts them per process. The child opens one pool
// to check the database is reachable and one per subtest; the kill test's
// own child, which builds the Target anew, opens exactly one, through the
// same factory. The notification properties pass on pgx, whose driver
// listens on any pool of pgx's database/sql driver, and are skipped on the
// lib/pq connector's pool, which the pq driver cannot listen on.
func TestTargetOpenDB(t *testing.T) {
	switch os.Getenv(envFactory) {
	case "pgx":
		conformance.Run(t, conformance.Target{Driver: refuseOpen(pgxdriver.New()), DSN: pgtest.DSN(t), OpenDB: openPgx})
		return
	case "pq":
		conformance.Run(t, conformance.Target{Driver: refuseOpen(pqdriver.New()), DSN: pgtest.DSN(t), OpenDB: openPq})
		return
	}
	for _, drv := range []struct{ name, notify string }{{"pgx", "PASS"}, {"pq", "SKIP"}} {
		t.Run(drv.name, func(t *testing.T) {
			results, out, err := runChild(t, "TestTargetOpenDB", factoryTests, envFactory+"="+drv.name)
			for _, name := range factoryTests {
				want := "PASS"
				if strings.Contains(name, "Notif") {
					want = drv.notify
				}
				if results[name] != want {
					t.Errorf("%s through the %s factory: %s, want %s", name, drv.name, results[name], want)
				}
			}
			if err != nil {
				t.Errorf("the suite through the %s factory exited with %v, want success; its output:\n%s", drv.name, err, out)
			}
			pools := map[string]int{}
			for _, m := range factoryLine.FindAllStringSubmatch(out, -1) {
				pools[m[1]]++
			}
			killed := killedLine.FindStringSubmatch(out)
			if killed == nil {
				t.Fatalf("the kill test logged no killed child; the output:\n%s", out)
			}
			if n := pools[killed[1]]; n != 1 {
				t.Errorf("the kill test's child, process %s, opened %d pools through the factory; want 1", killed[1], n)
			}
			delete(pools, killed[1])
			if len(pools) != 1 {
				t.Fatalf("pools opened through the factory, per process other than the kill test's child: %v; want one process", pools)
			}
			for pid, n := range pools {
				if n != 1+len(factoryTests) {
					t.Errorf("process %s opened %d pools through the factory; want %d (one to check the database, one per subtest)", pid, n, 1+len(factoryTests))
				}
			}
		})
	}
}

// openPgx is a pool factory of the kind a driver's author passes as
// Target.OpenDB: a pool of pgx's database/sql driver from a ConnConfig of
// its own (an application name here, a TLS config or a tracer elsewhere).
func openPgx(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "leasework conformance"
	announcePool()
	return stdlib.OpenDB(*cfg), nil
}

// openPq is a pool factory on lib/pq's own connector.
func openPq(dsn string) (*sql.DB, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	announcePool()
	return sql.OpenDB(c), nil
}

func announcePool() { fmt.Fprintf(os.Stderr, "LEASEWORK-FACTORY pid=%d\n", os.Getpid()) }

// noOpen is a driver whose Open fails: with Target.OpenDB set, the suite
// must open no pool with Driver.Open. It keeps the driver's Listen.
type noOpen struct {
	leasework.Driver
	leasework.Notifier
}

func refuseOpen(drv interface {
	leasework.Driver
	leasework.Notifier
}) noOpen {
	return noOpen{drv, drv}
}

func (noOpen) Open(string) (*sql.DB, error) {
	return nil, errors.New("Driver.Open called although Target.OpenDB is set")
}
