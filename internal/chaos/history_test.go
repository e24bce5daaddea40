//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/history"
)

// readHistory gathers the run's history: the audit and the effects from
// the database, the handler runs from the workers' files, and the test's
// own records.
func (s *soak) readHistory(ctx context.Context) (*history.History, error) {
	policy := func(p framework.RetryPolicy) *history.Policy {
		return &history.Policy{InitialInterval: p.InitialInterval, Multiplier: p.Multiplier, MaxInterval: p.MaxInterval, MaxAttempts: p.MaxAttempts}
	}
	h := &history.History{
		Kinds: map[string]history.Kind{
			plainKind:  {Policy: policy(soakPolicy)},
			txKind:     {Transactional: true, Policy: policy(soakPolicy)},
			snoozyKind: {Policy: policy(snoozyPolicy)},
			tickKind:   {Policy: policy(soakPolicy)},
		},
		Schedules: []history.Schedule{{Name: tickName, Kind: tickKind, Every: tickEvery}},
		Processes: map[string]history.Process{},
		Operators: operators,
	}
	for i := range numWorkers {
		h.Kinds[probeKind(i)] = history.Kind{Policy: policy(soakPolicy)}
	}
	s.mu.Lock()
	h.Enqueues = append(h.Enqueues, s.enqueues...)
	h.Cancels = append(h.Cancels, s.cancels...)
	h.Pauses = append(h.Pauses, s.pauses...)
	h.Faults = append(h.Faults, s.faultWindows...)
	h.Settled = s.settled
	all := s.all
	s.mu.Unlock()
	for _, w := range all {
		h.Processes[w.id] = history.Process{Exited: w.goneAt()}
		runs, err := readRuns(w.runs, w.id)
		if err != nil {
			return nil, err
		}
		h.Runs = append(h.Runs, runs...)
	}
	var err error
	if h.Writes, err = s.readAudit(ctx); err != nil {
		return nil, fmt.Errorf("read the audit: %w", err)
	}
	if h.Effects, err = s.readEffects(ctx); err != nil {
		return nil, fmt.Errorf("read the effects: %w", err)
	}
	return h, nil
}

// historyEnv names a file to write the run's history to, as JSON; a run
// whose history shows violations writes it to the temporary directory
// anyway, and says where.
const historyEnv = "LEASEWORK_SOAK_HISTORY"

func writeHistory(path string, h *history.History) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// readRuns reads a worker's runs file: each start with its end, if any.
func readRuns(path, worker string) ([]history.Run, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil // it never ran a handler
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type claim struct{ row, gen int64 }
	var runs []history.Run
	open := map[claim]int{} // index in runs
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var l runLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		k := claim{l.Row, l.Gen}
		switch l.T {
		case "start":
			open[k] = len(runs)
			runs = append(runs, history.Run{Worker: worker, Row: l.Row, EventID: l.Event, Kind: l.Kind, Generation: l.Gen, Start: time.Unix(0, l.At)})
		case "end":
			i, ok := open[k]
			if !ok {
				return nil, fmt.Errorf("%s line %d: the end of a run of row %d generation %d that never started", path, n, l.Row, l.Gen)
			}
			delete(open, k)
			r := &runs[i]
			r.End, r.Result, r.Delay, r.Err = time.Unix(0, l.At), l.Result, time.Duration(l.Delay), l.Err
		default:
			return nil, fmt.Errorf("%s line %d: %q", path, n, sc.Text())
		}
	}
	return runs, sc.Err()
}

// rowImage is an events row as the audit's to_jsonb records it.
type rowImage struct {
	ID          int64   `json:"id"`
	EventID     string  `json:"event_id"`
	Kind        string  `json:"kind"`
	Key         *string `json:"key"`
	Queue       string  `json:"queue"`
	Status      string  `json:"status"`
	Generation  int64   `json:"generation"`
	Attempt     int     `json:"attempt"`
	MaxAttempts int     `json:"max_attempts"`
	LeaseUntil  *string `json:"lease_until"`
	NextAttempt string  `json:"next_attempt_at"`
	Worker      *string `json:"worker"`
	KeySeq      *int64  `json:"key_seq"`
	LastError   *string `json:"last_error"`
	CancelledAt *string `json:"cancelled_at"` // from migration 11 on
}

func (r rowImage) state() (history.State, error) {
	st := history.State{Status: r.Status, Generation: r.Generation, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Worker: deref(r.Worker), LastError: deref(r.LastError)}
	if r.KeySeq != nil {
		st.KeySeq = *r.KeySeq
	}
	var err error
	for _, t := range []struct {
		text *string
		into *time.Time
	}{{r.LeaseUntil, &st.LeaseUntil}, {r.CancelledAt, &st.CancelledAt}} {
		if t.text == nil {
			continue
		}
		if *t.into, err = time.Parse(time.RFC3339Nano, *t.text); err != nil {
			return st, err
		}
	}
	st.NextAttempt, err = time.Parse(time.RFC3339Nano, r.NextAttempt)
	return st, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readAudit reads every audit row, in order.
func (s *soak) readAudit(ctx context.Context) ([]history.Write, error) {
	rows, err := s.admin.QueryContext(ctx, `SELECT id, op, writer, txid, stmt_at, at, COALESCE(old::text, ''), COALESCE(new::text, '')
		FROM `+auditTable+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []history.Write
	for rows.Next() {
		var w history.Write
		var oldJSON, newJSON string
		if err := rows.Scan(&w.Seq, &w.Op, &w.Writer, &w.Txid, &w.Stmt, &w.At, &oldJSON, &newJSON); err != nil {
			return nil, err
		}
		var img rowImage
		for _, side := range []struct {
			text  string
			state *history.State
		}{{oldJSON, &w.Old}, {newJSON, &w.New}} {
			if side.text == "" {
				continue
			}
			if err := json.Unmarshal([]byte(side.text), &img); err != nil {
				return nil, fmt.Errorf("audit %d: %w", w.Seq, err)
			}
			st, err := img.state()
			if err != nil {
				return nil, fmt.Errorf("audit %d: %w", w.Seq, err)
			}
			*side.state = st
			w.Row, w.EventID, w.Kind, w.Key, w.Queue = img.ID, img.EventID, img.Kind, deref(img.Key), img.Queue
			img = rowImage{}
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// readEffects reads every business effect that committed.
func (s *soak) readEffects(ctx context.Context) ([]history.Effect, error) {
	rows, err := s.admin.QueryContext(ctx, `SELECT event_id, row_id, generation, worker, txid FROM `+effectsTable+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []history.Effect
	for rows.Next() {
		var e history.Effect
		if err := rows.Scan(&e.EventID, &e.Row, &e.Generation, &e.Worker, &e.Txid); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// checkHistory checks the history and reports its verdict: each violation
// as a failure (at most a few per property), or, in a run against a
// deliberate break, whether the break was caught. It returns the verdict.
func (s *soak) checkHistory(ctx context.Context) (history.Verdict, bool) {
	t := s.t
	h, err := s.readHistory(ctx)
	if err != nil {
		t.Errorf("soak seed=%d: reading the history: %v", s.seed, err)
		return history.Verdict{}, false
	}
	v := history.Check(h)
	if path := os.Getenv(historyEnv); path != "" || !v.OK() {
		if path == "" {
			path = filepath.Join(os.TempDir(), fmt.Sprintf("leasework-soak-%d-history.json", s.seed))
		}
		if err := writeHistory(path, h); err != nil {
			t.Errorf("soak seed=%d: writing the history: %v", s.seed, err)
		} else {
			t.Logf("the history is in %s (%d writes, %d runs)", path, len(h.Writes), len(h.Runs))
		}
	}
	var report strings.Builder
	for _, p := range history.Properties {
		of := v.Of(p)
		for i, x := range of {
			if i == 10 {
				fmt.Fprintf(&report, "\n  %s: and %d more", p, len(of)-i)
				break
			}
			fmt.Fprintf(&report, "\n  %s", x)
		}
	}
	if s.brk == "" {
		if !v.OK() {
			t.Errorf("soak seed=%d: the history shows %d violations:%s", s.seed, len(v.Violations), report.String())
		}
		return v, true
	}
	var missed []string
	for _, p := range breaks[s.brk].properties {
		if len(v.Of(p)) == 0 {
			missed = append(missed, p)
		}
	}
	if len(missed) > 0 {
		t.Errorf("soak seed=%d: the library was broken (%s: %s), and the history shows no %s violation; it shows %d others:%s",
			s.seed, s.brk, breaks[s.brk].what, strings.Join(missed, " nor "), len(v.Violations), report.String())
	} else {
		t.Logf("the break %s (%s) was caught: the history shows %d violations:%s", s.brk, breaks[s.brk].what, len(v.Violations), report.String())
	}
	return v, true
}
