package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasework/leasework/lease"
	"github.com/robfig/cron/v3"
)

// Missed says what a worker does with the firings of a schedule that fell
// due before it started: while no worker ran, or while this one was
// restarting. A firing that falls due while the worker runs is always
// enqueued, late if the database cannot be reached at the time.
type Missed int

const (
	// MissedRunOnce, the zero value, enqueues at start the latest firing
	// that fell due before the worker started, if it is less than
	// [MissedLookback] old: the missed firings run once, together. It is
	// the default because a restart that spans a firing does not lose it,
	// and it cannot run a firing twice: a firing that was enqueued (by
	// this worker before it restarted, or by another) is a duplicate event
	// id and is skipped. On a schedule's very first start it enqueues the
	// latest past firing too: the scheduler keeps no state to tell a new
	// schedule from a missed firing.
	MissedRunOnce Missed = iota

	// MissedSkip enqueues only the firings that fall due after the worker
	// started. A firing that fell due while no worker ran is lost.
	MissedSkip
)

// String returns the constant's name.
func (m Missed) String() string {
	switch m {
	case MissedRunOnce:
		return "MissedRunOnce"
	case MissedSkip:
		return "MissedSkip"
	}
	return fmt.Sprintf("Missed(%d)", int(m))
}

// MissedLookback is the oldest a missed firing can be and still be
// enqueued by [MissedRunOnce]: the dedupe window, less an hour of room for
// the clocks of workers and database to differ. A firing's event id is
// refused as a duplicate for as long as its row exists, and a DONE row is
// kept at least DedupeWindow after its completion; an older firing may have
// run and been deleted since, and enqueueing it again would run it twice.
const MissedLookback = DedupeWindow - time.Hour

// MaxPeriodicNameBytes bounds [Periodic.Name]: the name and the fire time
// must fit in an event id (lease.MaxEventIDBytes).
const MaxPeriodicNameBytes = lease.MaxEventIDBytes - len(":2006-01-02T15:04:05Z")

// Periodic is a schedule of events: each firing enqueues one event. See
// "Periodic events" in the package doc.
type Periodic struct {
	// Name identifies the schedule among the worker's. Each firing's event
	// id is the name and the fire time in UTC, RFC 3339:
	// "report:2026-03-01T03:00:00Z" for a firing of "report" at 3am UTC.
	// That id is what makes a firing enqueued once by every worker that has
	// the schedule: workers sharing a table and a Name must have the same
	// Schedule. Required; valid UTF-8 without NUL bytes, at most
	// [MaxPeriodicNameBytes].
	Name string

	// Schedule says when it fires: a cron spec of five fields (minute,
	// hour, day of month, month, day of week: "0 3 * * *" is 3am every
	// day), a descriptor (@hourly, @daily or @midnight, @weekly, @monthly,
	// @yearly or @annually), or a fixed interval, "@every 30s". A cron spec
	// or descriptor is read in UTC unless it starts with a time zone,
	// "TZ=Europe/Paris 0 3 * * *" (or CRON_TZ=), so that workers in
	// different zones agree; a local time that a daylight-saving change
	// skips or repeats fires once (see "Periodic events" in the package
	// doc). An interval is a whole number of seconds, at
	// least 1s, and fires at its multiples since the Unix epoch: "@every
	// 5m" at :00, :05, :10... of every hour, "@every 24h" at midnight UTC,
	// whatever the time zone and whenever the worker started. Required.
	Schedule string

	// Kind is the kind of the events enqueued. Required; see
	// lease.ValidateKind. The worker need not handle it: another may.
	Kind string

	// Payload is the body of every event enqueued. Nil is stored as empty.
	Payload []byte

	// Queue is the queue of the events, as lease.Event.Queue. Empty means
	// lease.DefaultQueue.
	Queue string

	// Priority is the events' priority, as lease.Event.Priority: 0, the
	// default, to lease.MaxPriority.
	Priority int

	// Missed says what to do with the firings that fell due before the
	// worker started. Zero means [MissedRunOnce].
	Missed Missed
}

// Schedule adds a periodic schedule: while [Worker.Run] runs, each firing
// of p.Schedule enqueues one event, with the event id "<Name>:<fire
// time>", p's kind, payload, queue and priority, and the fire time as its
// RunAt. Every worker sharing the table may have the same schedule; each
// firing is enqueued once across all of them.
//
// It returns an error, and schedules nothing, when a field is not valid
// (the error names it), when the worker already has a schedule of that
// name, when the schedule never fires, when the worker deletes rows at
// completion (Config.DeleteAtCompletion: a firing's deleted row no longer
// keeps it from being enqueued again), or when Run has started.
func (w *Worker) Schedule(p Periodic) error {
	times, err := p.check(w.sched.clock())
	if err != nil {
		return fmt.Errorf("framework: Schedule %q: %w", p.Name, err)
	}
	if w.cfg.DeleteAtCompletion {
		return fmt.Errorf("framework: Schedule %q: Config.DeleteAtCompletion deletes each row at completion, and with it the event id that keeps a firing from being enqueued twice; periodic events need DONE rows kept (Retention)", p.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("framework: Schedule %q: the worker is already running", p.Name)
	}
	for _, s := range w.sched.list {
		if s.Name == p.Name {
			return fmt.Errorf("framework: Schedule %q: the worker already has a schedule of that name", p.Name)
		}
	}
	p.Payload = bytes.Clone(p.Payload)
	w.sched.list = append(w.sched.list, &schedule{Periodic: p, times: times})
	return nil
}

// check validates p and parses its schedule. Its errors start with the
// field's name.
func (p Periodic) check(now time.Time) (fireTimes, error) {
	switch {
	case p.Name == "":
		return nil, errors.New("Periodic.Name is empty")
	case len(p.Name) > MaxPeriodicNameBytes:
		return nil, fmt.Errorf("Periodic.Name is %d bytes long; at most %d are allowed", len(p.Name), MaxPeriodicNameBytes)
	case !utf8.ValidString(p.Name) || strings.IndexByte(p.Name, 0) >= 0:
		return nil, errors.New("Periodic.Name is not valid UTF-8 without NUL bytes")
	}
	times, err := parseSchedule(p.Schedule)
	if err != nil {
		return nil, fmt.Errorf("Periodic.Schedule %q: %w", p.Schedule, err)
	}
	if times.next(now).IsZero() {
		return nil, fmt.Errorf("Periodic.Schedule %q never fires", p.Schedule)
	}
	if err := lease.ValidateKind(p.Kind); err != nil {
		return nil, fmt.Errorf("Periodic.Kind: %w", err)
	}
	if p.Queue != "" {
		if err := lease.ValidateQueue(p.Queue); err != nil {
			return nil, fmt.Errorf("Periodic.Queue: %w", err)
		}
	}
	if p.Priority < 0 || p.Priority > lease.MaxPriority {
		return nil, fmt.Errorf("Periodic.Priority is %d; it must be between 0 and %d", p.Priority, lease.MaxPriority)
	}
	if p.Missed != MissedRunOnce && p.Missed != MissedSkip {
		return nil, fmt.Errorf("Periodic.Missed is %v; it must be MissedRunOnce or MissedSkip", p.Missed)
	}
	return times, nil
}

// fireTimes are a schedule's fire times.
type fireTimes interface {
	// next returns the first fire time after t, or the zero time if there
	// is none within five years.
	next(t time.Time) time.Time
	// latest returns the last fire time in (after, now], or the zero time.
	latest(after, now time.Time) time.Time
}

// parseSchedule parses a cron spec, a descriptor or "@every <interval>"
// with robfig/cron's standard parser. Only the parser is used: fire times
// are computed here, so that every worker computes the same ones, and so
// that a local time skipped or repeated by a daylight-saving change fires
// once (cron's own Next skips the first and fires the second twice).
func parseSchedule(spec string) (_ fireTimes, err error) {
	defer func() {
		if recover() != nil { // cron v3.0.1 panics on "TZ=x" without a space
			err = errors.New("cannot be parsed: a time zone must be followed by a space and a schedule")
		}
	}()
	if strings.HasPrefix(spec, "TZ=Local ") || strings.HasPrefix(spec, "CRON_TZ=Local ") {
		return nil, errors.New("the local time zone differs from machine to machine; name a zone")
	}
	parsed, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, err
	}
	switch s := parsed.(type) {
	case *cron.SpecSchedule:
		if s.Location == time.Local { // no zone given: UTC, not each machine's own
			s.Location = time.UTC
		}
		return newCronTimes(s)
	case cron.ConstantDelaySchedule:
		// The parser rounds the interval silently (down to whole seconds,
		// up to 1s), and counts it from whenever it is asked: read it again
		// and refuse what it would round.
		_, text, _ := strings.Cut(spec, "@every ")
		d, err := time.ParseDuration(strings.TrimSpace(text))
		if err != nil {
			return nil, err
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("the interval %v must be a whole number of seconds, at least 1s", d)
		}
		return interval(d), nil
	}
	return nil, fmt.Errorf("unexpected schedule type %T", parsed)
}

// cronTimes are the fire times of a cron spec or descriptor: its local
// times (at most one a minute) in its zone, each resolved to an instant by
// [resolveWall]. A local time the clocks skip names the first instant after
// the gap, and one they repeat its first occurrence; local times that name
// the same instant are one firing. The map from local times to instants
// keeps their order (it never goes back), which is what lets next skip a
// whole day or hour by its last local time.
type cronTimes struct {
	minute, hour, dom, month, dow uint64 // robfig/cron's bit sets
	loc                           *time.Location
}

// newCronTimes takes the fields of a parsed spec. The standard parser has
// no seconds field: every spec fires at second 0.
func newCronTimes(s *cron.SpecSchedule) (cronTimes, error) {
	if s.Second != 1 {
		return cronTimes{}, errors.New("a schedule with seconds is not supported")
	}
	return cronTimes{minute: s.Minute, hour: s.Hour, dom: s.Dom, month: s.Month, dow: s.Dow, loc: s.Location}, nil
}

// starBit is robfig/cron's mark of a field given as "*" (or "?").
const starBit = 1 << 63

// dayMatches reports whether the civil date day (a date in UTC standing for
// the zone's date) matches the spec's month, day of month and day of week,
// as cron reads them: a restricted day of month and day of week match
// either; either one given as "*" leaves the other alone to decide.
func (c cronTimes) dayMatches(day time.Time) bool {
	if c.month&(1<<uint(day.Month())) == 0 {
		return false
	}
	domMatch := c.dom&(1<<uint(day.Day())) != 0
	dowMatch := c.dow&(1<<uint(day.Weekday())) != 0
	if c.dom&starBit != 0 || c.dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// at returns the instant the local time h:m of the civil date day names.
func (c cronTimes) at(day time.Time, h, m int) time.Time {
	return resolveWall(c.loc, day.Add(time.Duration(h)*time.Hour+time.Duration(m)*time.Minute))
}

// last returns the highest value of the bit set among 0 to n-1.
func last(bits uint64, n int) int {
	for i := n - 1; i > 0; i-- {
		if bits&(1<<uint(i)) != 0 {
			return i
		}
	}
	return 0
}

// next walks the civil dates from two days before t's (no local time of an
// earlier date can name an instant after t), skipping each date, then each
// hour, whose last matching local time names an instant at or before t.
func (c cronTimes) next(t time.Time) time.Time {
	l := t.In(c.loc)
	day := time.Date(l.Year(), l.Month(), l.Day()-2, 0, 0, 0, 0, time.UTC)
	end := day.AddDate(5, 0, 2)
	lastHour, lastMinute := last(c.hour, 24), last(c.minute, 60)
	for ; day.Before(end); day = day.AddDate(0, 0, 1) {
		if !c.dayMatches(day) || !c.at(day, lastHour, lastMinute).After(t) {
			continue
		}
		for h := range 24 {
			if c.hour&(1<<uint(h)) == 0 || !c.at(day, h, lastMinute).After(t) {
				continue
			}
			for m := range 60 {
				if c.minute&(1<<uint(m)) == 0 {
					continue
				}
				if at := c.at(day, h, m); at.After(t) {
					return at
				}
			}
		}
	}
	return time.Time{}
}

// latest steps through the fire times from after: at most one a minute,
// and after is never more than MissedLookback before now.
func (c cronTimes) latest(after, now time.Time) time.Time {
	var last time.Time
	for t := c.next(after); !t.IsZero() && !t.After(now); t = c.next(t) {
		last = t
	}
	return last
}

// resolveWall returns the instant (in UTC) a wall-clock time of loc names:
// wall's fields, read in UTC, are the local date and time. A wall time
// that occurs once names that instant; one the clocks repeat (they were set
// back) names its first occurrence; one they skip (set forward) names the
// first instant after the gap, the change itself. time.Date leaves the
// last two to chance; this decides them from the zone's periods, each an
// offset in force over a span of instants.
func resolveWall(loc *time.Location, wall time.Time) time.Time {
	w := wall.Unix()
	// Offsets lie within -12h and +14h: every instant whose wall time is w
	// lies within [w-14h, w+12h]. Walk the zone's periods over it, in order.
	const span = 15 * 60 * 60
	u := time.Unix(w-span, 0)
	havePrev, prevOffset := false, 0
	for {
		z := u.In(loc)
		_, offset := z.Zone()
		start, end := z.ZoneBounds() // zero: unbounded
		if havePrev && start.Unix()+int64(prevOffset) <= w && w < start.Unix()+int64(offset) {
			return start.UTC() // w is in the gap this period's start opens
		}
		at := w - int64(offset)
		if (start.IsZero() || at >= start.Unix()) && (end.IsZero() || at < end.Unix()) {
			return time.Unix(at, 0).UTC() // the first period that has w is its first occurrence
		}
		if end.IsZero() || end.Unix() > w+span {
			break
		}
		u, havePrev, prevOffset = end, true, offset
	}
	// Not reached with tzdata's zones; time.Date's choice, if ever.
	return time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, loc).UTC()
}

// interval fires at the multiples of itself since the Unix epoch.
type interval time.Duration

// floor returns the last fire time at or before t.
func (iv interval) floor(t time.Time) time.Time {
	n, d := t.UnixNano(), int64(iv)
	k := n / d
	if n%d < 0 {
		k-- // before the epoch: round down, not toward zero
	}
	return time.Unix(0, k*d).UTC()
}

func (iv interval) next(t time.Time) time.Time {
	return iv.floor(t).Add(time.Duration(iv))
}

func (iv interval) latest(after, now time.Time) time.Time {
	if t := iv.floor(now); t.After(after) {
		return t
	}
	return time.Time{}
}

// scheduler is a worker's schedules and the clock they run on.
type scheduler struct {
	list []*schedule // set by Schedule, before Run

	// Set by tests only, before Run: the time, a wait until a time, and a
	// report of each firing's enqueue.
	now   func() time.Time
	sleep func(ctx context.Context, until time.Time)
	fired func(eventID string, duplicate bool, err error)
}

// schedule is one Periodic as the scheduler runs it.
type schedule struct {
	Periodic
	times    fireTimes
	done     time.Time // the firings up to this one are enqueued (or not to be)
	retryAt  time.Time // when a failed enqueue is tried again; zero: none failed
	failures int       // enqueues failed in a row
}

// Bounds of the scheduler's waits.
const (
	// maxSchedulerWait bounds one wait, so that a clock stepped forward,
	// or a machine woken from sleep, is noticed within it.
	maxSchedulerWait = time.Minute
	// A failed enqueue is tried again after 1s, then after waits doubling
	// up to 30s, and at the schedule's next firing if it comes first.
	minFiringRetry = time.Second
	maxFiringRetry = 30 * time.Second
)

func (sc *scheduler) clock() time.Time {
	if sc.now != nil {
		return sc.now()
	}
	return time.Now()
}

func (sc *scheduler) sleepUntil(ctx context.Context, until time.Time) {
	if sc.sleep != nil {
		sc.sleep(ctx, until)
		return
	}
	d := time.Until(until)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// runSchedules enqueues the firings of the worker's schedules until ctx
// ends. At each wake-up it enqueues, for each schedule, the latest firing
// due and not yet enqueued: firings that fell due while enqueues failed
// (or while the machine slept) collapse into the latest. Every worker with
// the schedule computes the same fire times, and so the same event ids,
// and enqueues skipping duplicates: each firing is enqueued once.
func (w *Worker) runSchedules(ctx context.Context) {
	sc := &w.sched
	if len(sc.list) == 0 {
		return
	}
	start := sc.clock()
	names := make([]string, len(sc.list))
	for i, s := range sc.list {
		names[i] = s.Name
		if s.Missed == MissedSkip {
			s.done = start
		}
	}
	w.log.Info("scheduler started", "schedules", names)
	for ctx.Err() == nil {
		now := sc.clock()
		wake := now.Add(maxSchedulerWait)
		for _, s := range sc.list {
			w.fire(ctx, s, now)
			if ctx.Err() != nil {
				return
			}
			if n := s.times.next(now); !n.IsZero() && n.Before(wake) {
				wake = n
			}
			if !s.retryAt.IsZero() && s.retryAt.Before(wake) {
				wake = s.retryAt
			}
		}
		sc.sleepUntil(ctx, wake)
	}
}

// fire enqueues the latest firing of s due at now, if it is not enqueued
// yet and within the schedule's Missed policy, in a transaction of its
// own.
func (w *Worker) fire(ctx context.Context, s *schedule, now time.Time) {
	after := s.done
	if floor := now.Add(-MissedLookback); after.Before(floor) {
		after = floor
	}
	at := s.times.latest(after, now)
	if at.IsZero() {
		s.retryAt, s.failures = time.Time{}, 0 // a failed firing older than the lookback is given up
		return
	}
	eventID := breakFiringID(firingEventID(s.Name, at), w.cfg.WorkerID) // the id itself but in the chaos soak's deliberately broken builds (breaks_off.go)
	dup, err := w.enqueueFiring(ctx, s, eventID, at)
	if err != nil && ctx.Err() != nil {
		return // stopping: not a firing's failure
	}
	if f := w.sched.fired; f != nil {
		f(eventID, dup, err)
	}
	if err != nil {
		s.failures++
		delay := min(minFiringRetry<<min(s.failures-1, 10), maxFiringRetry)
		s.retryAt = now.Add(delay)
		w.log.Warn("periodic event not enqueued; trying again", "schedule", s.Name, "event_id", eventID, "retry_in", delay, "err", err)
		return
	}
	s.done, s.retryAt, s.failures = at, time.Time{}, 0
	w.log.Debug("periodic event enqueued", "schedule", s.Name, "event_id", eventID, "duplicate", dup)
}

// firingEventID is the event id of schedule name's firing at the instant
// at: a function of the two alone, so that every worker computes the same.
func firingEventID(name string, at time.Time) string {
	return name + ":" + at.UTC().Format(time.RFC3339)
}

// enqueueFiring enqueues one firing, skipping it if its event id exists,
// and reports whether it did.
func (w *Worker) enqueueFiring(ctx context.Context, s *schedule, eventID string, at time.Time) (duplicate bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.statementTimeout())
	defer cancel()
	tx, err := w.store.DB().BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	out, err := w.store.EnqueueWith(ctx, tx, lease.EnqueueOptions{SkipDuplicates: true}, lease.Event{
		EventID:  eventID,
		Kind:     s.Kind,
		Payload:  s.Payload,
		Queue:    s.Queue,
		Priority: s.Priority,
		RunAt:    at,
	})
	if err != nil {
		return false, err
	}
	return out[0].Duplicate, tx.Commit()
}
