//go:build linux

package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/history"
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
			edgeKind:   {Policy: policy(soakPolicy)},
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
	h.Limits = append(h.Limits, s.limits...)
	h.RateLimits = append(h.RateLimits, s.rateLimits...)
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

// writeSlotAudit writes the audit of the limits' slots (of kinds and
// queues, and of partitions) and of the rate limits' shares ("table" says
// which) to path, a JSON object a line, in order, and returns how many it
// wrote. The checker does not read it: with the history's claims (their
// transactions), it tells which slot each claim took, or which starts a
// share held, for the diagnosis of a limits or a rates violation.
func (s *soak) writeSlotAudit(ctx context.Context, path string) (int, error) {
	rows, err := s.admin.QueryContext(ctx, `SELECT json_build_object('seq', id, 'table', tab, 'op', op, 'writer', writer, 'txid', txid,
		'stmt', stmt_at, 'at', at, 'old', old, 'new', new)::text FROM `+slotAuditTable+` ORDER BY id`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var b strings.Builder
	n := 0
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return 0, err
		}
		b.WriteString(line + "\n")
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return n, os.WriteFile(path, []byte(b.String()), 0o644)
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
		case "step-read", "step-ran":
			i, ok := open[k]
			if !ok {
				return nil, fmt.Errorf("%s line %d: a step of a run of row %d generation %d that never started", path, n, l.Row, l.Gen)
			}
			if l.T == "step-ran" {
				runs[i].StepRan = true
				continue
			}
			g, err := strconv.ParseInt(strings.TrimPrefix(l.Value, "g"), 10, 64)
			if err != nil || !strings.HasPrefix(l.Value, "g") {
				return nil, fmt.Errorf("%s line %d: a step's result %q names no generation", path, n, l.Value)
			}
			runs[i].StepRead = g
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

// rowColumns are the fields of a row image (old or new) of the audit that
// the history follows, extracted by the server; all NULL when the image is
// (the old row of an insert, the new row of a delete).
func rowColumns(side string) string {
	f := func(name, typ string) string { return "(" + side + "->>'" + name + "')::" + typ }
	return strings.Join([]string{
		f("id", "bigint"), f("event_id", "text"), f("kind", "text"), f("key", "text"), f("queue", "text"),
		f("status", "text"), f("generation", "bigint"), f("attempt", "int"), f("max_attempts", "int"),
		f("lease_until", "timestamptz"), f("next_attempt_at", "timestamptz"), f("worker", "text"),
		f("key_seq", "bigint"), f("last_error", "text"), f("cancelled_at", "timestamptz"), // cancelled_at: from migration 11 on
		f("kind_slot", "bigint"), f("queue_slot", "bigint"), // from migration 17 on
		f("partition_key", "text"), f("partition_slot", "bigint"), // from migration 19 on
		f("cost", "int"), // from migration 21 on
		// The steps (migration 26 on): each one's name, the generation
		// that recorded it, and its result, decoded from base64.
		"(SELECT jsonb_object_agg(s.key, jsonb_build_array((s.value->>'g')::bigint, convert_from(decode(s.value->>'v', 'base64'), 'UTF8')))" +
			" FROM jsonb_each(CASE WHEN jsonb_typeof(" + side + "->'steps') = 'object' THEN " + side + "->'steps' END) AS s)::text",
	}, ", ")
}

// image receives the columns of rowColumns.
type image struct {
	id                                   sql.NullInt64
	eventID, kind, key, queue, status    sql.NullString
	generation                           sql.NullInt64
	attempt, maxAttempts                 sql.NullInt32
	leaseUntil, nextAttempt, cancelledAt sql.NullTime
	worker, lastError, partition         sql.NullString
	keySeq, kindSlot, queueSlot          sql.NullInt64
	partitionSlot                        sql.NullInt64
	cost                                 sql.NullInt32
	steps                                sql.NullString
}

func (m *image) dest() []any {
	return []any{&m.id, &m.eventID, &m.kind, &m.key, &m.queue, &m.status, &m.generation, &m.attempt, &m.maxAttempts,
		&m.leaseUntil, &m.nextAttempt, &m.worker, &m.keySeq, &m.lastError, &m.cancelledAt, &m.kindSlot, &m.queueSlot,
		&m.partition, &m.partitionSlot, &m.cost, &m.steps}
}

func (m *image) state() history.State {
	return history.State{Status: m.status.String, Generation: m.generation.Int64, Attempt: int(m.attempt.Int32),
		MaxAttempts: int(m.maxAttempts.Int32), LeaseUntil: m.leaseUntil.Time, NextAttempt: m.nextAttempt.Time,
		Worker: m.worker.String, KeySeq: m.keySeq.Int64, LastError: m.lastError.String, CancelledAt: m.cancelledAt.Time,
		KindSlot: m.kindSlot.Int64, QueueSlot: m.queueSlot.Int64, PartitionSlot: m.partitionSlot.Int64,
		Steps: stepsOf(m.steps.String)}
}

// stepsOf decodes an image's steps, as rowColumns extracts them: an
// object from each step's name to [generation, result]; nil for none.
func stepsOf(text string) map[string]history.StepRecord {
	if text == "" {
		return nil
	}
	var raw map[string][2]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		panic(fmt.Sprintf("the audit's steps %q: %v", text, err))
	}
	out := make(map[string]history.StepRecord, len(raw))
	for name, r := range raw {
		var rec history.StepRecord
		var value string
		if err := json.Unmarshal(r[0], &rec.Gen); err != nil {
			panic(fmt.Sprintf("the audit's step %q: %v", name, err))
		}
		if err := json.Unmarshal(r[1], &value); err != nil {
			panic(fmt.Sprintf("the audit's step %q: %v", name, err))
		}
		rec.Value = value
		out[name] = rec
	}
	return out
}

// readAudit reads every audit row, in order.
func (s *soak) readAudit(ctx context.Context) ([]history.Write, error) {
	rows, err := s.admin.QueryContext(ctx, `SELECT id, op, writer, txid, stmt_at, at, `+rowColumns("old")+`, `+rowColumns("new")+`
		FROM `+auditTable+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []history.Write
	for rows.Next() {
		var w history.Write
		var o, n image
		dest := append([]any{&w.Seq, &w.Op, &w.Writer, &w.Txid, &w.Stmt, &w.At}, append(o.dest(), n.dest()...)...)
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		w.Old, w.New = o.state(), n.state()
		im := &n
		if !n.id.Valid {
			im = &o
		}
		w.Row, w.EventID, w.Kind, w.Key, w.Queue = im.id.Int64, im.eventID.String, im.kind.String, im.key.String, im.queue.String
		w.Partition, w.Cost = im.partition.String, int(im.cost.Int32)
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
		slots := strings.TrimSuffix(path, ".json") + "-slots.jsonl"
		if n, err := s.writeSlotAudit(ctx, slots); err != nil {
			t.Logf("writing the audit of the limits' slots: %v", err)
		} else {
			t.Logf("the audit of the limits' slots is in %s (%d writes)", slots, n)
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
