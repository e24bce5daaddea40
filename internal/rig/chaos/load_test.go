//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasework/leasework/internal/rig/history"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// The keys of keyed events: many cold ones, a few hot ones that get a
// third of the keyed events, and a fresh key per chain (see nextEvents).
const (
	coldKeys = 200
	hotKeys  = 3
)

// maxBacklog bounds the unfinished events the enqueuer lets pile up: a
// machine too busy to handle the configured rate gets fewer events, not a
// backlog that takes minutes to drain (and starves a key's followers of
// a late priority behind it).
const maxBacklog = 200

// enqueueLoop enqueues events at the configured rate, in small
// transactions, while the backlog allows, until the faults are done and
// enough events were acknowledged, recording every enqueue for the
// history.
func (s *soak) enqueueLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 2))
	const every = 100 * time.Millisecond
	per := max(s.cfg.rate*int(every/time.Millisecond)/1000, 1)
	tick := time.NewTicker(every)
	defer tick.Stop()
	n, chains, turn := 0, 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case <-injected:
			s.mu.Lock()
			enough := s.acked >= s.cfg.minEvents
			s.mu.Unlock()
			if enough {
				return
			}
		default:
		}
		if backlog, err := s.backlog(ctx); err != nil || backlog >= maxBacklog {
			continue // the server is away, or the workers are behind
		}
		events, recorded := nextEvents(rng, &n, &chains, per)
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		invoked := time.Now()
		store := s.store // the INSERT and COPY in turns
		if turn++; turn%2 == 0 {
			store = s.copier
		}
		_, err := pgtest.EnqueueCommitted(ectx, store, events...)
		returned := time.Now()
		cancel()
		s.record(history.Enqueue{Invoked: invoked, Returned: returned, Acked: err == nil, Events: recorded})
	}
}

// backlog counts the unfinished events.
func (s *soak) backlog(ctx context.Context) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	err := s.admin.QueryRowContext(qctx, `SELECT count(*) FROM `+s.store.QualifiedTable()+`
		WHERE status IN ('READY', 'INPROGRESS', 'WAITING')`).Scan(&n)
	return n, err
}

// record appends an enqueue to the history.
func (s *soak) record(e history.Enqueue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enqueues = append(s.enqueues, e)
	if e.Acked {
		s.acked += len(e.Events)
	} else {
		s.unknown += len(e.Events)
	}
}

// nextEvents draws one transaction's events: per events of every kind, a
// third of them Transactional, a tenth snoozing, three in ten of the plain
// and Transactional ones keyed (a quarter of those on the hot keys); and,
// in a quarter of the transactions, a chain: a keyed event that holds its
// handler (a target of the canceller) with one or two events behind it on
// a fresh key. A quarter of the keyless plain and Transactional events,
// and the events of one cold key in four, are of a tenant (a partition,
// t-0 to t-3, under the partition limits); and in a quarter of the
// transactions comes a burst of two to four keyless events of one
// tenant. A quarter of the snoozing events cost snoozyCostly starts under
// the kind's rate limit, the others 1. Of the payloads some ask to fail
// (keyless plain events only: a FAILED event would hold its key), to fail
// once, to be retried after a delay of their own, or to hold (keyless, or
// a chain's head: a hot key must keep up with its events); a few are due
// later, a few were due seconds ago. Events without a key spread over the
// queues and priorities.
func nextEvents(rng *rand.Rand, n, chains *int, per int) ([]lease.Event, []history.Event) {
	var events []lease.Event
	var recorded []history.Event
	partition := "" // of the next event added
	cost := 1       // of the next event added
	add := func(kind, key, queue, payload string, priority int, runAt time.Time) {
		*n++
		id := "e-" + strconv.Itoa(*n)
		events = append(events, lease.Event{EventID: id, Kind: kind, Key: key, Queue: queue, Priority: priority,
			Payload: []byte(payload), MaxAttempts: maxAttempts, RunAt: runAt, Partition: partition, Cost: cost})
		cost = 1
		want := history.Done
		if payload == payloadFail {
			want = history.Failed
		}
		recorded = append(recorded, history.Event{EventID: id, Kind: kind, Key: key, Want: want})
	}
	for range per {
		var runAt time.Time
		switch p := rng.IntN(100); {
		case p < 5:
			runAt = time.Now().Add(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		case p < 8:
			// Due seconds ago: behind the claims' floors (framework/floor.go),
			// as a row committed long after it came due is.
			runAt = time.Now().Add(-time.Duration(3000+rng.IntN(7000)) * time.Millisecond)
		}
		if rng.IntN(100) < 10 {
			if rng.IntN(4) == 0 {
				cost = snoozyCostly
			}
			add(snoozyKind, "", "default", fmt.Sprintf("%s%d:%d", payloadSnooze, 1+rng.IntN(3), 10+rng.IntN(40)), rng.IntN(4), runAt)
			continue
		}
		kind := plainKind
		if rng.IntN(3) == 0 {
			kind = txKind
		}
		var key string
		partition = ""
		if rng.IntN(10) < 3 {
			if rng.IntN(4) == 0 {
				key = "hot-" + strconv.Itoa(rng.IntN(hotKeys))
			} else {
				k := rng.IntN(coldKeys)
				key = "k-" + strconv.Itoa(k)
				if k%4 == 0 {
					// A key of a tenant: its events wait for their turn
					// and a place of the tenant's.
					partition = "t-" + strconv.Itoa(k/4%tenants)
				}
			}
		} else if rng.IntN(4) == 0 {
			partition = "t-" + strconv.Itoa(rng.IntN(tenants))
		}
		payload := payloadOK
		switch p := rng.IntN(100); {
		case p < 8:
			payload = payloadFlaky
		case p < 16:
			payload = payloadRetry + strconv.Itoa(20+rng.IntN(180))
		case p < 20 && key == "" && partition != hotTenant: // the hot tenant's one place would be held most of the time
			payload = payloadHold
		case p < 24 && key == "" && kind == plainKind:
			payload = payloadFail
		}
		queue, priority := "default", rng.IntN(4)
		if key == "" && rng.IntN(5) == 0 {
			queue, priority = bulkQueue, rng.IntN(10)
		}
		add(kind, key, queue, payload, priority, runAt)
	}
	if rng.IntN(4) == 0 {
		// A burst of one tenant's events, more than its limit: a claim
		// takes what the tenant has room for, and sets the others aside.
		partition = "t-" + strconv.Itoa(rng.IntN(tenants))
		kind := plainKind
		if rng.IntN(3) == 0 {
			kind = txKind
		}
		queue := "default"
		if rng.IntN(4) == 0 {
			queue = bulkQueue
		}
		for range 2 + rng.IntN(3) {
			payload := payloadOK
			switch p := rng.IntN(20); {
			case p < 1 && partition != hotTenant:
				payload = payloadHold
			case p < 3:
				payload = payloadFlaky
			}
			add(kind, "", queue, payload, rng.IntN(4), time.Time{})
		}
	}
	partition = ""
	if rng.IntN(4) == 0 {
		*chains++
		key := "c-" + strconv.Itoa(*chains)
		kind := plainKind
		if rng.IntN(2) == 0 {
			kind = txKind
		}
		add(kind, key, "default", payloadHold, 0, time.Time{})
		for range 1 + rng.IntN(2) {
			add(plainKind, key, "default", payloadOK, 0, time.Time{})
		}
	}
	return events, recorded
}

// What the canceller aims at.
type cancelTarget struct {
	name   string
	weight int
	where  string // of the events table; $1 is the hold payload
}

var cancelTargets = []cancelTarget{
	// A running key head that holds its handler, with events behind it:
	// the cancelled handler runs on until it is told, and no event of its
	// key may start meanwhile.
	{"running head", 40, `status = 'INPROGRESS' AND payload = $1 AND key LIKE 'c-%'`},
	{"running", 10, `status = 'INPROGRESS'`},
	{"waiting", 25, `status = 'WAITING'`},
	{"ready, not yet due", 15, `status = 'READY' AND next_attempt_at > clock_timestamp() + interval '50 milliseconds'`},
	{"finished", 10, `status = 'DONE'`},
}

// cancelLoop cancels events while the faults are done: running key heads
// most, waiting, retrying or scheduled ones, and finished ones (which a
// cancel must leave alone), recording every call for the history.
func (s *soak) cancelLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 3))
	total := 0
	for _, c := range cancelTargets {
		total += c.weight
	}
	for {
		gap := time.Duration(100+rng.IntN(300)) * time.Millisecond
		pick, choice := rng.IntN(total), rng.Uint64()
		select {
		case <-ctx.Done():
			return
		case <-injected:
			return
		case <-time.After(gap):
		}
		var target cancelTarget
		for _, c := range cancelTargets {
			if pick -= c.weight; pick < 0 {
				target = c
				break
			}
		}
		id, eventID, err := s.pickTarget(ctx, target, choice)
		if err != nil || id == 0 {
			continue // none now, or the server is away: another time
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c := history.Cancel{EventID: eventID, Row: id, Invoked: time.Now()}
		res, err := s.ops.Cancel(cctx, id, "soak: "+target.name)
		c.Returned = time.Now()
		cancel()
		switch {
		case err == nil:
			c.Result, c.Generation, c.Stopping = history.CancelOK, res.Generation, res.Stopping
		case errors.Is(err, lease.ErrFinished):
			c.Result = history.CancelFinished
		default:
			c.Result = history.CancelUnknown
		}
		s.mu.Lock()
		s.cancels = append(s.cancels, c)
		s.mu.Unlock()
		s.tracef("cancel of %s (%s, row %d): %s %v", eventID, target.name, id, c.Result, err)
	}
}

// pickTarget returns one of the latest events matching target, chosen by
// choice; id 0 when none matches.
func (s *soak) pickTarget(ctx context.Context, target cancelTarget, choice uint64) (id int64, eventID string, err error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var args []any
	if strings.Contains(target.where, "$1") {
		args = append(args, []byte(payloadHold))
	}
	// Never a probe: the recovery checks wait for each; nor the slow
	// renewals' kind: a cancel of the test's own claim would leave its
	// renewal refused (limits_test.go).
	rows, err := s.admin.QueryContext(qctx, `SELECT id, event_id FROM `+s.store.QualifiedTable()+`
		WHERE `+target.where+` AND kind NOT LIKE 'probe-%' AND kind <> '`+edgeKind+`' ORDER BY id DESC LIMIT 20`, args...)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	type candidate struct {
		id      int64
		eventID string
	}
	var found []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.eventID); err != nil {
			return 0, "", err
		}
		found = append(found, c)
	}
	if err := rows.Err(); err != nil || len(found) == 0 {
		return 0, "", err
	}
	c := found[choice%uint64(len(found))]
	return c.id, c.eventID, nil
}

// pauseLoop pauses the bulk queue for a while, resumes it, and again,
// while the faults are done, recording every pause that returned for the
// history. It returns with the queue resumed.
func (s *soak) pauseLoop(ctx context.Context, injected <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, 4))
	for {
		select {
		case <-ctx.Done():
			return
		case <-injected:
			return
		case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.ops.PauseQueue(pctx, bulkQueue)
		cancel()
		p := history.Pause{Queue: bulkQueue, Paused: time.Now()}
		if !sleep(ctx, time.Duration(300+rng.IntN(1200))*time.Millisecond) {
			return
		}
		p.Resumed = time.Now()
		// Resume whatever the pause's outcome: a pause whose reply was
		// lost may have committed.
		if rerr := retry(ctx, "resume queue "+bulkQueue, func(ctx context.Context) error {
			_, err := s.ops.ResumeQueue(ctx, bulkQueue)
			return err
		}); rerr != nil {
			s.failf("resuming queue %s: %v", bulkQueue, rerr)
			return
		}
		if err == nil {
			s.mu.Lock()
			s.pauses = append(s.pauses, p)
			s.mu.Unlock()
		}
	}
}
