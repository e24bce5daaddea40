package conformance

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/internal/leasetest"
	"github.com/leasework/leasework/lease"
)

// The properties of named queues and priorities.
func queueProperties() []property {
	return []property{
		{"QueuesNeverShareEventsUnderConcurrentClaimers", queuesNeverShareEvents},
		{"ClaimTakesPriorityThenDueOrder", claimTakesPriorityThenDueOrder},
		{"PausedQueueGivesNothingUntilResumed", pausedQueueGivesNothing},
	}
}

// Four claimers, two on the default queue (claiming with no queue named)
// and two on "mail", over several rounds; between rounds the leases of the
// claims they abandoned expire by fixture, so each round after the first
// starts with expired leases in both queues. A third queue, "idle", that
// nobody serves holds READY rows and expired leases throughout. It must
// hold that: every claim returns rows of its own queue only (by the queue
// the row was enqueued into, and as the claim reports it); no (id,
// generation) is handed out twice; every row of the served queues ends
// DONE with a generation equal to the times it was claimed; and the idle
// queue's rows are never claimed.
func queuesNeverShareEvents(e *env) {
	const perQueue, idle, workers = 150, 20, 4
	served := []string{lease.DefaultQueue, "mail"}

	// Event ids name their queue and their priority: <queue>-<n>, priority
	// n mod 10.
	var events []lease.Event
	for i := range perQueue {
		for _, q := range served {
			events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprintf("%s-%03d", q, i),
				Queue: queueArg(q), Priority: i % (lease.MaxPriority + 1)})
		}
	}
	for i := range idle {
		events = append(events, lease.Event{Kind: "k", EventID: fmt.Sprintf("idle-%03d", i), Queue: "idle"})
	}
	e.enqueue(events...)

	// Half of the idle queue claimed, then its leases expire: expired
	// leases no claimer of another queue may take.
	idleClaims, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: idle / 2, Lease: testLease, Queue: "idle"})
	wantOK(e.t, "claim of the idle queue", err)
	if len(idleClaims) != idle/2 {
		e.t.Fatalf("claim of %d from the idle queue returned %d rows", idle/2, len(idleClaims))
	}
	for _, c := range idleClaims {
		if !strings.HasPrefix(c.EventID, "idle-") {
			e.t.Fatalf("claim of the idle queue returned %s", c.EventID)
		}
		e.expire(c.ID) // fixture: the idle queue's owner died
	}

	var mu sync.Mutex
	seen := map[leasework.Ref]bool{}
	claimsPerRow := map[int64]int64{}
	var violations []string
	violate := func(format string, args ...any) {
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}
	for round := 1; ; round++ {
		if round > 20 {
			e.t.Fatal("rows still unfinished after 20 rounds")
		}
		var abandoned []int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			queue := served[w%len(served)]
			wg.Go(func() {
				for n := 0; ; n++ {
					got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1 + (w+n)%5, Lease: testLease,
						Queue: queueArg(queue), Worker: fmt.Sprintf("claimer-%d", w)})
					if err != nil {
						errs <- fmt.Errorf("claim of queue %s: %w", queue, err)
						return
					}
					if len(got) == 0 {
						return
					}
					var done []leasework.Ref
					mu.Lock()
					for _, c := range got {
						enqueued, priority := eventQueue(c.EventID)
						if enqueued != queue || c.Queue != queue {
							violate("a claim of queue %s returned %s (row %d), enqueued into %s and reported in queue %q",
								queue, c.EventID, c.ID, enqueued, c.Queue)
						} else if c.Priority != priority {
							violate("%s (row %d) was enqueued with priority %d and claimed with %d", c.EventID, c.ID, priority, c.Priority)
						}
						if seen[c.Ref()] {
							violate("row %d generation %d handed out twice", c.ID, c.Generation)
						}
						seen[c.Ref()] = true
						claimsPerRow[c.ID]++
						// Abandon about one claim in seven, as a crashed worker would.
						if (c.ID+int64(round))%7 == 0 {
							abandoned = append(abandoned, c.ID)
						} else {
							done = append(done, c.Ref())
						}
					}
					mu.Unlock()
					res, err := e.store.WriteMany(e.ctx, completes(done)...)
					if err = answered(res, err); err == nil {
						err = firstErr(res)
					}
					if err != nil {
						errs <- fmt.Errorf("complete: %w", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatal(err)
		}
		if len(violations) > 0 {
			e.t.Fatalf("queues shared their events:\n%s", strings.Join(violations, "\n"))
		}
		if len(abandoned) == 0 {
			break
		}
		for _, id := range abandoned {
			e.expire(id) // fixture: the abandoned claim's lease runs out
		}
	}

	list, err := e.fix.List(e.ctx, lease.ListRequest{Limit: len(events) + 1})
	wantOK(e.t, "list", err)
	if len(list) != len(events) {
		e.t.Fatalf("%d rows in the table, want %d", len(list), len(events))
	}
	idleClaimed := map[int64]bool{}
	for _, c := range idleClaims {
		idleClaimed[c.ID] = true
	}
	for _, r := range list {
		switch q, _ := eventQueue(r.EventID); {
		case q != "idle":
			if r.Status != leasework.StatusDone || r.Generation != e.gen(claimsPerRow[r.ID]) {
				e.t.Fatalf("row %d (%s): %s generation %d after %d claims; want DONE at generation %d",
					r.ID, r.EventID, r.Status, r.Generation, claimsPerRow[r.ID], e.gen(claimsPerRow[r.ID]))
			}
		case idleClaimed[r.ID]:
			if r.Status != leasework.StatusInProgress || r.Generation != e.gen(1) {
				e.t.Fatalf("expired lease %d (%s) of the idle queue is %s generation %d; want INPROGRESS generation %d, never reclaimed",
					r.ID, r.EventID, r.Status, r.Generation, e.gen(1))
			}
		default:
			if r.Status != leasework.StatusReady || r.Generation != 0 {
				e.t.Fatalf("READY row %d (%s) of the idle queue is %s generation %d; want READY generation 0, never claimed",
					r.ID, r.EventID, r.Status, r.Generation)
			}
		}
	}
}

// queueArg is how the suite names queue in an event or a claim: the
// default queue by leaving it empty, so that the empty name is proved to
// mean lease.DefaultQueue.
func queueArg(queue string) string {
	if queue == lease.DefaultQueue {
		return ""
	}
	return queue
}

// eventQueue reads the queue and the priority from an event id of
// queuesNeverShareEvents.
func eventQueue(eventID string) (queue string, priority int) {
	i := strings.LastIndexByte(eventID, '-')
	n, _ := strconv.Atoi(eventID[i+1:])
	return eventID[:i], n % (lease.MaxPriority + 1)
}

// Within a queue, claims taken one at a time come in priority order, 0
// first, and within a level in due order: next_attempt_at, then id (the
// order of enqueue). The events of each level are enqueued in neither
// order, the levels out of order too. Rows not yet due are skipped
// whatever their priority, and once due (by fixture) a priority 0 row is
// claimed before every waiting row of a later level. A due priority 0 row
// of another queue is never taken.
func claimTakesPriorityThenDueOrder(e *env) {
	// Far from now, so that the clocks of the suite and the database need
	// not agree to the minute.
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	later := time.Now().Add(24 * time.Hour)

	type want struct {
		eventID  string
		priority int
		runAt    time.Time
	}
	var events []lease.Event
	var due []want
	for _, p := range []int{9, 3, 0, 7, 1, 5, 2, 8, 4, 6} {
		// Per level, in enqueue order (and so, as the store numbers rows,
		// in id order): late, tie-b, early, tie-a. Due order is early,
		// tie-b, tie-a, late: neither id order nor the order of the event
		// ids. The expected sequence is computed from the ids the store
		// gave.
		for _, ev := range []struct {
			name   string
			offset time.Duration
		}{{"late", 2 * time.Minute}, {"tie-b", time.Minute}, {"early", 0}, {"tie-a", time.Minute}} {
			id := fmt.Sprintf("p%d-%s", p, ev.name)
			runAt := base.Add(ev.offset)
			events = append(events, lease.Event{Kind: "k", EventID: id, Queue: "mail", Priority: p, RunAt: runAt})
			due = append(due, want{id, p, runAt})
		}
	}
	events = append(events,
		lease.Event{Kind: "k", EventID: "p0-not-due", Queue: "mail", Priority: 0, RunAt: later},
		lease.Event{Kind: "k", EventID: "p4-not-due", Queue: "mail", Priority: 4, RunAt: later},
		lease.Event{Kind: "k", EventID: "other-queue-p0", Priority: 0, RunAt: base.Add(-time.Hour)})
	enqueued := e.enqueue(events...)
	rowOf := map[string]int64{}
	for _, en := range enqueued {
		rowOf[en.EventID] = en.ID
	}

	// The expected sequence: priority, then next_attempt_at, then id.
	slices.SortFunc(due, func(a, b want) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), a.runAt.Compare(b.runAt), cmp.Compare(rowOf[a.eventID], rowOf[b.eventID]))
	})
	// p0-not-due falls due once every due row of levels 0 to 3 is claimed:
	// it must come next, before the rows of level 4.
	var sequence []want
	for _, w := range due {
		if w.priority == 4 && (len(sequence) == 0 || sequence[len(sequence)-1].priority < 4) {
			sequence = append(sequence, want{"p0-not-due", 0, time.Time{}})
		}
		sequence = append(sequence, w)
	}

	claimMail := func() []leasework.Claim {
		e.t.Helper()
		got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 1, Lease: testLease, Queue: "mail", Worker: e.t.Name()})
		wantOK(e.t, "claim of queue mail", err)
		return got
	}
	var claimed []string
	for i, w := range sequence {
		if w.eventID == "p0-not-due" {
			wantOK(e.t, "make due", leasetest.MakeDue(e.ctx, e.fix, rowOf[w.eventID])) // fixture: its time comes
		}
		got := claimMail()
		if len(got) != 1 || got[0].EventID != w.eventID || got[0].ID != rowOf[w.eventID] || got[0].Priority != w.priority || got[0].Queue != "mail" {
			e.t.Fatalf("claim %d of queue mail = %s; want %s (row %d, priority %d, queue mail); claimed before it: %v",
				i+1, describe(got), w.eventID, rowOf[w.eventID], w.priority, claimed)
		}
		claimed = append(claimed, w.eventID)
	}
	if got := claimMail(); len(got) != 0 {
		e.t.Fatalf("claimed %s; want nothing (p4-not-due is not due, other-queue-p0 is in another queue)", describe(got))
	}
	e.wantState(rowOf["p4-not-due"], leasework.StatusReady, 0)
	e.wantState(rowOf["other-queue-p0"], leasework.StatusReady, 0)
}

// A paused queue gives nothing: neither its READY rows, nor an event
// enqueued into it while paused, nor an expired lease; another queue runs
// meanwhile, and the owner of a live claim of the paused queue still
// records its outcome. Once resumed, the queue gives its rows again, the
// expired lease at a new generation.
func pausedQueueGivesNothing(e *env) {
	evs := e.enqueue(
		lease.Event{Kind: "k", EventID: "mail-1", Queue: "mail"},
		lease.Event{Kind: "k", EventID: "mail-2", Queue: "mail"},
		lease.Event{Kind: "k", EventID: "mail-3", Queue: "mail"},
		lease.Event{Kind: "k", EventID: "mail-4", Queue: "mail"},
		lease.Event{Kind: "k", EventID: "default-1"},
		lease.Event{Kind: "k", EventID: "default-2"})
	claimOf := func(queue string) []leasework.Claim {
		e.t.Helper()
		got, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 10, Lease: testLease, Queue: queue, Worker: e.t.Name()})
		wantOK(e.t, "claim of queue "+queue, err)
		return got
	}
	eventIDs := func(claims []leasework.Claim) []string {
		var ids []string
		for _, c := range claims {
			ids = append(ids, c.EventID)
		}
		slices.Sort(ids) // a claim returns its rows in no particular order
		return ids
	}

	// Which two rows the first claim takes is not this property's
	// business: it works with whichever it gets.
	first, err := e.store.Claim(e.ctx, lease.ClaimRequest{Limit: 2, Lease: testLease, Queue: "mail"})
	wantOK(e.t, "claim of queue mail", err)
	if len(first) != 2 || first[0].ID == first[1].ID || first[0].Queue != "mail" || first[1].Queue != "mail" ||
		!strings.HasPrefix(first[0].EventID, "mail-") || !strings.HasPrefix(first[1].EventID, "mail-") {
		e.t.Fatalf("claim of 2 from queue mail = %s; want two rows of queue mail", describe(first))
	}
	expired, live := first[0], first[1]
	e.expire(expired.ID) // fixture: its owner died
	// The READY rows of mail.
	var waiting []int64
	for _, ev := range evs[:4] {
		if ev.ID != expired.ID && ev.ID != live.ID {
			waiting = append(waiting, ev.ID)
		}
	}

	ran, err := e.store.PauseQueue(e.ctx, "mail")
	wantOK(e.t, "pause", err)
	if !ran {
		e.t.Fatal("PauseQueue of a running queue reported that it was not running")
	}
	late := e.enqueue(lease.Event{Kind: "k", EventID: "mail-5", Queue: "mail"})[0]
	if got := claimOf("mail"); len(got) != 0 {
		e.t.Fatalf("claim of the paused queue mail = %v; want nothing", eventIDs(got))
	}
	if got := eventIDs(claimOf("")); !slices.Equal(got, []string{"default-1", "default-2"}) {
		e.t.Fatalf("claim of the default queue while mail is paused = %v; want default-1 and default-2", got)
	}
	wantOK(e.t, "complete of a live claim of the paused queue", e.write(lease.Complete(live.Ref())))
	e.wantState(expired.ID, leasework.StatusInProgress, e.gen(1))
	for _, id := range append(waiting, late.ID) {
		e.wantState(id, leasework.StatusReady, 0)
	}

	was, err := e.store.ResumeQueue(e.ctx, "mail")
	wantOK(e.t, "resume", err)
	if !was {
		e.t.Fatal("ResumeQueue of a paused queue reported that it was not paused")
	}
	again := claimOf("mail")
	// Row to generation.
	want := map[int64]int64{expired.ID: e.gen(2), waiting[0]: e.gen(1), waiting[1]: e.gen(1), late.ID: e.gen(1)}
	got := map[int64]int64{}
	for _, c := range again {
		got[c.ID] = c.Generation
	}
	if len(again) != len(want) || !maps.Equal(got, want) {
		e.t.Fatalf("claim of queue mail after resume = %s; want %s (its expired lease) at generation %d and the rows %d, %d and %d (mail-5) at generation %d",
			describe(again), expired.EventID, e.gen(2), waiting[0], waiting[1], late.ID, e.gen(1))
	}
	e.wantState(live.ID, leasework.StatusDone, e.gen(1))
}

// describe names claims for a failure message: event id, row, generation,
// priority and queue of each.
func describe(claims []leasework.Claim) string {
	parts := make([]string, len(claims))
	for i, c := range claims {
		parts[i] = fmt.Sprintf("%s (row %d, generation %d, priority %d, queue %q)", c.EventID, c.ID, c.Generation, c.Priority, c.Queue)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
