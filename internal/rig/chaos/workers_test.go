//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

// slot is one of the soak's worker positions: its driver and proxy stay,
// the worker process in it is replaced when killed.
type slot struct {
	n      int
	driver string
	proxy  *pgtest.Proxy

	// Guarded by soak.mu.
	w           *worker
	incarnation int
	busy        bool      // a fault is being done to it, or its recovery checked
	pending     int       // restarts whose check of it waits for it to be free
	silencedAt  time.Time // database clock just before its last blackhole
	probes      int       // probe events enqueued for it
}

// worker is one worker process.
type worker struct {
	id   string
	slot int
	cmd  *exec.Cmd

	ending atomic.Bool   // the test is ending it (SIGKILL or SIGTERM): its exit is expected
	exited chan struct{} // closed once it has exited and its output is read
	state  *os.ProcessState
	err    error // from Wait

	runs string // the file its handler runs are appended to

	mu       sync.Mutex
	counters workerCounters // its last snapshot
	lines    int            // snapshots read
	final    bool           // counters is its final line
	gone     time.Time      // when it was known to run no more code (see history.Process)
	tail     tail           // the end of its output, for failure reports
}

// startWorker starts a worker process in sl, with a new id. The caller
// holds sl (busy) or owns the soak alone.
func (s *soak) startWorker(sl *slot) (*worker, error) {
	s.mu.Lock()
	sl.incarnation++
	id := fmt.Sprintf("w%d-%d", sl.n, sl.incarnation)
	s.mu.Unlock()
	dsn, err := withApp(sl.proxy.DSN(), id)
	if err != nil {
		return nil, err
	}
	runs := filepath.Join(s.runsDir, id+".runs")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		childWorkerEnv+"="+id, childDSNEnv+"="+dsn, childDriverEnv+"="+sl.driver,
		fmt.Sprintf("%s=%d", childSlotEnv, sl.n), childRunsEnv+"="+runs)
	// A worker must not outlive the test process, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	w := &worker{id: id, slot: sl.n, cmd: cmd, runs: runs, exited: make(chan struct{})}
	// Both pipes are drained to their end, whatever the test does, so that
	// a worker never blocks on a full pipe; Wait comes after.
	var read sync.WaitGroup
	read.Go(func() { w.readStdout(stdout) })
	read.Go(func() { _, _ = io.Copy(&w.tail, stderr) })
	go func() {
		read.Wait()
		w.err = cmd.Wait()
		w.state = cmd.ProcessState
		w.markGone()
		close(w.exited)
		if !w.ending.Load() {
			s.failf("worker %s exited by itself: %v; the end of its output:\n%s", w.id, w.err, w.tail.last(reportBytes))
		}
	}()
	s.mu.Lock()
	sl.w = w
	s.all = append(s.all, w)
	s.mu.Unlock()
	return w, nil
}

// readStdout reads the worker's counters lines until its stdout closes.
func (w *worker) readStdout(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		final := strings.HasPrefix(line, finalLine)
		rest, ok := strings.CutPrefix(line, countersLine)
		if final {
			rest, ok = strings.CutPrefix(line, finalLine)
		}
		var c workerCounters
		if !ok || json.Unmarshal([]byte(rest), &c) != nil {
			fmt.Fprintf(&w.tail, "stdout: %s\n", line)
			continue
		}
		w.mu.Lock()
		w.counters, w.final = c, final
		w.lines++
		w.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// snapshot returns the worker's last counters and whether they are its
// final ones.
func (w *worker) snapshot() (workerCounters, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counters, w.final
}

// freshCounters waits for a snapshot of the worker's counters taken after
// the call (the second line printed after it), and returns it.
func (w *worker) freshCounters(ctx context.Context) (framework.Counters, error) {
	w.mu.Lock()
	from := w.lines
	w.mu.Unlock()
	var c workerCounters
	err := poll(ctx, processBound, "a fresh line of "+w.id+"'s counters", func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		c = w.counters
		return w.lines >= from+2, nil
	})
	return c.Counters, err
}

// markGone records that the worker runs no more code, if it was not known
// already.
func (w *worker) markGone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone.IsZero() {
		w.gone = time.Now()
	}
}

// goneAt returns when the worker was known to run no more code; zero if it
// was not.
func (w *worker) goneAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

// signal sends sig to the worker.
func (w *worker) signal(sig syscall.Signal) error {
	if err := w.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v to worker %s: %w", sig, w.id, err)
	}
	return nil
}

// wait waits for the worker to exit, at most bound.
func (w *worker) wait(bound time.Duration) error {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-w.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("worker %s had not exited %v later; the end of its output:\n%s", w.id, bound, w.tail.last(reportBytes))
	}
}

// kill ends the worker with SIGKILL and checks that it died of it.
func (w *worker) kill(bound time.Duration) error {
	w.ending.Store(true)
	if err := w.signal(syscall.SIGKILL); err != nil {
		return err
	}
	w.markGone() // a process sent SIGKILL runs no more code of its own
	if err := w.wait(bound); err != nil {
		return err
	}
	if ws, ok := w.state.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("worker %s: %v after SIGKILL; want death by SIGKILL", w.id, w.err)
	}
	return nil
}

// terminate stops the worker with SIGTERM and checks that it exited with
// status 0 within bound, having printed its final counters.
func (w *worker) terminate(bound time.Duration) error {
	w.ending.Store(true)
	if err := w.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := w.wait(bound); err != nil {
		return err
	}
	if w.err != nil {
		return fmt.Errorf("worker %s after SIGTERM: %v; want exit status 0; the end of its output:\n%s", w.id, w.err, w.tail.last(reportBytes))
	}
	if _, final := w.snapshot(); !final {
		return fmt.Errorf("worker %s exited on SIGTERM without its final counters", w.id)
	}
	return nil
}

// dump makes the worker print every goroutine's stack and exit (SIGQUIT),
// and returns the end of its output, for a failure report.
func (w *worker) dump() string {
	w.ending.Store(true)
	_ = w.signal(syscall.SIGCONT)
	if err := w.signal(syscall.SIGQUIT); err != nil {
		return err.Error()
	}
	if err := w.wait(processBound); err != nil {
		return err.Error()
	}
	return w.tail.String()
}

// stopped reports whether the kernel shows the worker stopped (SIGSTOP).
func (w *worker) stopped() (bool, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.cmd.Process.Pid))
	if err != nil {
		return false, err
	}
	// The state follows the parenthesized command name.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return false, errors.New("unreadable /proc stat")
	}
	return strings.HasPrefix(string(stat[i+1:]), " T"), nil
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

// tailBytes is how much of a worker's output is kept: enough for its
// goroutines' stacks; reportBytes how much a failure report shows.
const (
	tailBytes   = 256 << 10
	reportBytes = 8 << 10
)

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// last returns the last n bytes kept, at most.
func (t *tail) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf[max(len(t.buf)-n, 0):])
}
