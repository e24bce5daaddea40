package conformance_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/leasework/leasework/conformance"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/pgtest"
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

var resultLine = regexp.MustCompile(`--- (PASS|FAIL|SKIP): TestBaselineSelfTest/(\w+)`)

// runSuite runs the lab's six tests against target in a child process and
// returns each test's result.
func runSuite(t *testing.T, target string) (map[string]string, error) {
	t.Helper()
	pattern := "^TestBaselineSelfTest$/^(" + strings.Join(conformance.LabTests, "|") + ")$"
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envSuiteTarget+"="+target)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	results := map[string]string{}
	for _, m := range resultLine.FindAllStringSubmatch(out.String(), -1) {
		results[m[2]] = m[1]
	}
	if len(results) != len(conformance.LabTests) {
		t.Fatalf("the %s run reported %d of the %d lab tests (%v); its output:\n%s", target, len(results), len(conformance.LabTests), err, out.String())
	}
	return results, err
}
