package history

import (
	"fmt"
	"maps"
	"strconv"
	"time"
)

// builder writes histories by hand: each method appends what the
// database's audit, a worker process or the test would have recorded, with
// times in milliseconds after t0.
type builder struct {
	h    History
	t0   time.Time
	seq  int64
	txid int64
	cur  map[int64]State
	meta map[int64]Write // each row's constants
	next int64           // the next row id
	kseq int64           // the next key_seq
}

const (
	op      = "test" // the test's sessions
	lease   = 100    // ms
	budget  = 10
	snoozy  = "snoozy"
	txKind  = "tx"
	plain   = "plain"
	tick    = "tick"
	tickEv  = 1000 // ms between ticks
	tickNam = "beat"
	lim     = "lim"   // a kind under a concurrency limit
	rated   = "rated" // a kind under a rate limit
)

var testPolicy = &Policy{InitialInterval: 10 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second}

func newBuilder() *builder {
	b := &builder{
		t0:   time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		cur:  map[int64]State{},
		meta: map[int64]Write{},
		next: 1,
	}
	b.h.Operators = []string{op}
	b.h.Processes = map[string]Process{}
	b.h.Kinds = map[string]Kind{
		plain:  {Policy: testPolicy},
		txKind: {Transactional: true, Policy: testPolicy},
		snoozy: {Policy: &Policy{InitialInterval: 10 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second, MaxAttempts: 3}},
		tick:   {},
	}
	b.h.Schedules = []Schedule{{Name: tickNam, Kind: tick, Every: tickEv * time.Millisecond}}
	return b
}

func (b *builder) at(ms int) time.Time { return b.t0.Add(time.Duration(ms) * time.Millisecond) }

// write appends an update of row by writer at ms, made by change.
func (b *builder) write(row int64, writer string, ms int, change func(s *State)) *Write {
	old := b.cur[row]
	n := old
	change(&n)
	return b.put(row, Update, writer, ms, old, n)
}

func (b *builder) put(row int64, opName, writer string, ms int, old, n State) *Write {
	b.seq++
	b.txid++
	m := b.meta[row]
	w := Write{Seq: b.seq, Op: opName, Row: row, EventID: m.EventID, Kind: m.Kind, Key: m.Key, Queue: m.Queue, Partition: m.Partition,
		Cost: m.Cost, Writer: writer, Txid: b.txid, Stmt: b.at(ms), At: b.at(ms), Old: old, New: n}
	b.h.Writes = append(b.h.Writes, w)
	b.cur[row] = n
	return &b.h.Writes[len(b.h.Writes)-1]
}

// ev is an event to enqueue.
type ev struct {
	id, kind, key, queue, want, partition string
	cost                                  int
}

// enqueue is an acknowledged enqueue called at ms, returned at ms+1: it
// inserts the rows, and at its commit puts each keyed row in line (WAITING
// behind a live or waiting row of its key). It returns the row ids.
func (b *builder) enqueue(ms int, events ...ev) []int64 {
	return b.enqueueCall(ms, ms+1, true, events...)
}

func (b *builder) enqueueCall(invoked, returned int, acked bool, events ...ev) []int64 {
	e := Enqueue{Invoked: b.at(invoked), Returned: b.at(returned), Acked: acked}
	var ids []int64
	for _, x := range events {
		id := b.next
		b.next++
		ids = append(ids, id)
		b.meta[id] = Write{EventID: x.id, Kind: cmpOr(x.kind, plain), Key: x.key, Queue: cmpOr(x.queue, "default"), Partition: x.partition,
			Cost: max(x.cost, 1)}
		b.put(id, Insert, op, invoked, State{}, State{Status: Ready, MaxAttempts: budget, NextAttempt: b.at(invoked)})
		e.Events = append(e.Events, Event{EventID: x.id, Kind: cmpOr(x.kind, plain), Key: x.key, Want: x.want})
	}
	for _, id := range ids {
		key := b.meta[id].Key
		if key == "" {
			continue
		}
		behind := false
		for other, s := range b.cur {
			if other != id && b.meta[other].Key == key && s.KeySeq != 0 && (s.Status == Ready || s.Status == InProgress || s.Status == Failed || s.Status == Waiting) {
				behind = true
			}
		}
		b.kseq++
		seq := b.kseq
		b.write(id, op, returned, func(s *State) {
			s.KeySeq = seq
			if behind {
				s.Status = Waiting
			}
		})
	}
	b.h.Enqueues = append(b.h.Enqueues, e)
	return ids
}

// claim claims row for worker at ms with a lease of leaseMs.
func (b *builder) claim(row int64, worker string, ms int) *Write {
	return b.write(row, worker, ms, func(s *State) {
		s.Status, s.Generation, s.Attempt = InProgress, s.Generation+1, s.Attempt+1
		s.Worker, s.LeaseUntil = worker, b.at(ms+lease)
	})
}

// claimIn claims row for worker at ms, counted in its partition's slot.
func (b *builder) claimIn(row int64, worker string, ms int, slot int64) *Write {
	w := b.claim(row, worker, ms)
	w.New.PartitionSlot = slot
	s := b.cur[row]
	s.PartitionSlot = slot
	b.cur[row] = s
	return w
}

// setAside is a claim's write, by worker at ms, that sets row aside
// (READY to WAITING) under its partition's limit; wake brings it back
// READY.
func (b *builder) setAside(row int64, worker string, ms int) *Write {
	return b.write(row, worker, ms, func(s *State) { s.Status = Waiting })
}

func (b *builder) wake(row int64, worker string, ms int) *Write {
	return b.write(row, worker, ms, func(s *State) { s.Status = Ready })
}

func (b *builder) gen(row int64) int64 { return b.cur[row].Generation }

// run records a handler run of row's current generation in worker.
func (b *builder) run(row int64, worker string, start, end int, result string, delay time.Duration) *Run {
	r := Run{Worker: worker, Row: row, EventID: b.meta[row].EventID, Kind: b.meta[row].Kind, Generation: b.gen(row),
		Start: b.at(start), Result: result, Delay: delay}
	if end >= 0 {
		r.End = b.at(end)
	}
	b.h.Runs = append(b.h.Runs, r)
	return &b.h.Runs[len(b.h.Runs)-1]
}

// finish ends row in status by its owner at ms and promotes its key's next
// waiting row in the same transaction, as the commit trigger does.
func (b *builder) finish(row int64, ms int, status string) *Write {
	w := b.write(row, b.cur[row].Worker, ms, func(s *State) {
		s.Status, s.LeaseUntil = status, time.Time{}
	})
	if status == Done {
		b.promote(row, ms)
	}
	return w
}

// takeTurn ends row DONE by its owner at ms and, in the same transaction,
// claims its key's first waiting row for that owner, as a completion that
// takes the turn it passes on does. It returns the row claimed.
func (b *builder) takeTurn(row int64, ms int) int64 {
	worker := b.cur[row].Worker
	done := b.write(row, worker, ms, func(s *State) {
		s.Status, s.LeaseUntil = Done, time.Time{}
	})
	key := b.meta[row].Key
	var first int64
	for other, s := range b.cur {
		if b.meta[other].Key == key && s.Status == Waiting && (first == 0 || s.KeySeq < b.cur[first].KeySeq) {
			first = other
		}
	}
	claim := b.claim(first, worker, ms)
	claim.Txid = done.Txid
	return first
}

// promote makes the first waiting row of row's key READY at ms.
func (b *builder) promote(row int64, ms int) {
	key := b.meta[row].Key
	if key == "" {
		return
	}
	var first int64
	for other, s := range b.cur {
		m := b.meta[other]
		if m.Key == key && s.Status == Waiting && (first == 0 || s.KeySeq < b.cur[first].KeySeq) {
			first = other
		}
		if m.Key == key && other != row && (s.Status == Ready || s.Status == InProgress || s.Status == Failed) {
			return
		}
	}
	if first != 0 {
		b.write(first, op, ms, func(s *State) { s.Status = Ready })
	}
}

// retry sends row back to READY by its owner at ms, due after delay; a
// snooze grows the budget.
func (b *builder) retry(row int64, ms int, delay time.Duration, snooze bool) *Write {
	return b.write(row, b.cur[row].Worker, ms, func(s *State) {
		s.Status, s.LeaseUntil, s.Worker = Ready, time.Time{}, ""
		s.NextAttempt = b.at(ms).Add(delay)
		if snooze {
			s.MaxAttempts++
		}
	})
}

// cancel is the test's cancel of row at ms: the write, the call, and the
// promotion of its key's next row.
func (b *builder) cancel(row int64, ms int) *Write {
	w := b.write(row, op, ms, func(s *State) {
		s.Status, s.Generation, s.LeaseUntil, s.LastError = Discarded, s.Generation+1, time.Time{}, "cancelled"
	})
	b.h.Cancels = append(b.h.Cancels, Cancel{EventID: b.meta[row].EventID, Row: row, Invoked: b.at(ms - 1), Returned: b.at(ms + 1),
		Result: CancelOK, Generation: w.New.Generation})
	b.promote(row, ms)
	return w
}

// mark is the test's cancel of row, run by an attempt, at ms: the row is
// only marked, and stays INPROGRESS under its owner's lease.
func (b *builder) mark(row int64, ms int) *Write {
	w := b.write(row, op, ms, func(s *State) { s.CancelledAt, s.LastError = b.at(ms), "cancelled" })
	b.h.Cancels = append(b.h.Cancels, Cancel{EventID: b.meta[row].EventID, Row: row, Invoked: b.at(ms - 1), Returned: b.at(ms + 1),
		Result: CancelOK, Generation: w.New.Generation, Stopping: true})
	return w
}

// stop ends a marked row DISCARDED at ms, written by writer (its owner,
// or a claim once the lease ended), and promotes its key's next row.
func (b *builder) stop(row int64, writer string, ms int) *Write {
	w := b.write(row, writer, ms, func(s *State) {
		s.Status, s.Generation, s.LeaseUntil = Discarded, s.Generation+1, time.Time{}
	})
	b.promote(row, ms)
	return w
}

// effect records the business effect of row's current claim, in the
// transaction of w.
func (b *builder) effect(row int64, w *Write) {
	s := b.cur[row]
	gen, worker := s.Generation, s.Worker
	if w != nil {
		gen, worker = w.Old.Generation, w.Old.Worker
	}
	e := Effect{EventID: b.meta[row].EventID, Row: row, Generation: gen, Worker: worker}
	if w != nil {
		e.Txid = w.Txid
	}
	b.h.Effects = append(b.h.Effects, e)
}

// handle claims row in worker at ms, runs it ok and completes it.
func (b *builder) handle(row int64, worker string, ms int) *Write {
	b.claim(row, worker, ms)
	b.run(row, worker, ms+1, ms+5, ResultOK, 0)
	return b.finish(row, ms+6, Done)
}

// handleTx is handle for a Transactional kind: the effect commits with the
// completion.
func (b *builder) handleTx(row int64, worker string, ms int) *Write {
	w := b.handle(row, worker, ms)
	b.effect(row, w)
	return w
}

// limit sets a concurrency limit: called at ms, returned at ms+1.
func (b *builder) limit(scope, name string, max, ms int) {
	b.h.Limits = append(b.h.Limits, Limit{Scope: scope, Name: name, Max: max, Invoked: b.at(ms), Returned: b.at(ms + 1)})
}

// rate sets a rate limit of max starts per per ms: called at ms, returned
// at ms+1.
func (b *builder) rate(scope, name string, max, per, ms int) {
	b.h.RateLimits = append(b.h.RateLimits, RateLimit{Scope: scope, Name: name, Max: max, Per: time.Duration(per) * time.Millisecond,
		Invoked: b.at(ms), Returned: b.at(ms + 1)})
}

// stepRecord records the soak's step by row's owner at ms, as its run of
// the current generation does: the record names that generation.
func (b *builder) stepRecord(row int64, ms int) *Write {
	return b.write(row, b.cur[row].Worker, ms, func(s *State) {
		s.Steps = withStep(s.Steps, StepName, StepRecord{Gen: s.Generation, Value: strconv.Quote("g" + strconv.FormatInt(s.Generation, 10))})
	})
}

// withStep returns a copy of steps with name's record rec.
func withStep(steps map[string]StepRecord, name string, rec StepRecord) map[string]StepRecord {
	out := maps.Clone(steps)
	if out == nil {
		out = map[string]StepRecord{}
	}
	out[name] = rec
	return out
}

// renew renews row's lease by its owner at ms.
func (b *builder) renew(row int64, ms int) *Write {
	return b.write(row, b.cur[row].Worker, ms, func(s *State) { s.LeaseUntil = b.at(ms + lease) })
}

// expire is the expiry fixture on row at ms: its lease moved into the
// past, as the soak's fixture moves it a second back.
func (b *builder) expire(row int64, ms int) *Write {
	return b.write(row, op, ms, func(s *State) { s.LeaseUntil = b.at(ms - 1000) })
}

// firing inserts schedule beat's firing at fire ms (by a worker) and
// handles it.
func (b *builder) firing(fire int, worker string) int64 {
	id := b.next
	b.next++
	t := b.at(fire)
	b.meta[id] = Write{EventID: fmt.Sprintf("%s:%s", tickNam, t.Format(time.RFC3339)), Kind: tick, Queue: "default"}
	b.put(id, Insert, worker, fire, State{}, State{Status: Ready, MaxAttempts: budget, NextAttempt: t})
	b.handle(id, worker, fire+1)
	return id
}
