package framework

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/leasework/leasework/lease"
)

// Defaults of [Config]; a zero field takes the value here.
const (
	DefaultConcurrency       = 1000
	DefaultLease             = 30 * time.Second
	DefaultPollInterval      = time.Second
	DefaultGracePeriod       = 10 * time.Second
	DefaultStopTimeout       = 5 * time.Second
	DefaultRetentionInterval = time.Minute
	DefaultRetentionBatch    = 1000
	DefaultTxConcurrency     = 50

	// DedupeWindow is how long, at least, a completed event's id stays in
	// the table, so that enqueueing it again is refused as a duplicate
	// (leasework.ErrDuplicateEvent, or Duplicate with SkipDuplicates) and
	// its handler does not run twice. Every configuration keeps it but
	// Config.DeleteAtCompletion: a positive Config.Retention below it is
	// refused.
	DedupeWindow = 24 * time.Hour

	// DefaultRetention is how long DONE rows are kept when
	// Config.Retention is zero: the dedupe window.
	DefaultRetention = DedupeWindow
)

// Limits of [Config] fields. Every duration has a maximum, so that no
// arithmetic on it (a jitter, a deadline, a sum of phases) can overflow.
const (
	MaxConcurrency       = lease.MaxClaimLimit // one claim statement fills every slot
	MinLease             = 100 * time.Millisecond
	MaxLease             = 24 * time.Hour
	MinRenewEvery        = 10 * time.Millisecond
	MinPollInterval      = 10 * time.Millisecond
	MaxPollInterval      = 24 * time.Hour
	MaxGracePeriod       = 24 * time.Hour
	MinStopTimeout       = 100 * time.Millisecond
	MaxStopTimeout       = 10 * time.Minute
	MaxAttemptTimeout    = 7 * 24 * time.Hour
	MaxRetention         = 10 * 365 * 24 * time.Hour
	MaxRetentionInterval = 24 * time.Hour
	MaxRetentionBatch    = 100000

	// ReservedConns is how many connections of a capped pool the worker
	// keeps from Transactional handlers (see Config.TxConcurrency): one
	// each for the claim loop, the outcome writer, the renewals and
	// retention.
	ReservedConns = 4
)

// Config configures a [Worker]. Its zero value is valid: every zero field
// takes the default documented on it. [New] rejects a value out of range
// with an error that names the field and the allowed range.
type Config struct {
	// Schema and Table name the events table, as in lease.Options. Zero
	// means the lease package's defaults ("leasework" and "events").
	Schema, Table string

	// WorkerID names this worker in the rows it claims and in logs. Zero
	// means "<hostname>-<pid>-<random hex>".
	WorkerID string

	// Concurrency is the most handlers running at once, and so the most
	// rows this worker claims at once: each claim statement takes as many
	// rows as there are free slots. Zero means 1000, as many as Temporal's
	// workers run activities by default: handlers wait on I/O, a slot costs
	// a goroutine only while it runs, and the claim, completion and renewal
	// statements cost less per event the more events they carry (a worker
	// of 1000 slots runs no-op events several times faster than one of 100).
	// The claims it holds at once, running or finished and waiting for
	// their outcome to be written, are at most twice Concurrency.
	// Lower it to bound the load on what the handlers call, or to spread a
	// small backlog of slow events over several workers: an idle worker
	// claims up to all of its free slots in one statement. At most 10000
	// (lease.MaxClaimLimit).
	Concurrency int

	// Queues are the queues this worker claims from (lease.Event.Queue).
	// Each has its own handler slots and its own claims, so a busy queue
	// never takes another's slots. Empty means lease.DefaultQueue alone,
	// with Concurrency slots. Names must be distinct.
	Queues []Queue

	// Lease is how long a claim is owned without renewal before another
	// worker may take the row. Zero means 30s; between 100ms and 24h.
	Lease time.Duration

	// RenewEvery is the longest a live claim goes without a renewal: each
	// claim is renewed once its last confirmed claim or renewal statement
	// is RenewEvery old (claims falling due together share one statement).
	// Zero means Lease/3; between 10ms and Lease/2, so that a renewal is
	// sent well before the worker gives the claim up at 0.9 × Lease.
	RenewEvery time.Duration

	// PollInterval is how long an idle worker waits before it looks for
	// work again when no notification wakes it. Each wait adds a random
	// jitter of up to a fifth of it, so a worker never polls faster than
	// PollInterval. After a failed claim the worker tries again sooner:
	// after 50ms, then waits doubling up to PollInterval. Zero means 1s;
	// between 10ms and 24h.
	PollInterval time.Duration

	// GracePeriod is how long a stopping worker lets running handlers
	// finish before it cancels their contexts with leasework.ErrShutdown.
	// Zero means 10s; negative means no grace: cancel at once; at most
	// 24h.
	GracePeriod time.Duration

	// StopTimeout bounds the end of a stop: after cancelling the handlers
	// still running, the worker waits at most this long for them to return
	// and for the last outcomes and releases to be written, then [Worker.Run]
	// returns. A handler that ignores its context is left running and its
	// claim is left to expire. Zero means 5s; between 100ms and 10m.
	StopTimeout time.Duration

	// AttemptTimeout bounds one attempt: past it the handler's context is
	// cancelled with leasework.ErrAttemptTimeout, and its claim is no longer
	// renewed. Zero means no timeout; at most 7 days; negative is an error.
	AttemptTimeout time.Duration

	// Retention is how long a finished row, DONE or DISCARDED (cancelled,
	// or given up on after it failed), is kept after it finished, and with
	// it its event id, which enqueue refuses as a duplicate while the row
	// exists. Zero means 24h (DedupeWindow); negative means forever;
	// positive must be between DedupeWindow and 10 years: a shorter one
	// would let a completed event be enqueued and handled again within the
	// window, and is refused. Kept rows are deleted once that old by a
	// background loop every RetentionInterval, in batches of RetentionBatch.
	// With DeleteAtCompletion, DISCARDED rows are kept DedupeWindow. FAILED
	// rows are always kept, for repair.
	Retention time.Duration

	// DeleteAtCompletion deletes each row in its completion's guarded
	// statement instead of marking it DONE: the fastest completion, and
	// no history, but it gives up deduplication after completion: once an
	// event is completed, its id can be enqueued again and its handler runs
	// again. For tables whose producers never send an event id twice, or
	// dedupe elsewhere. Retention must then be zero. False by default.
	DeleteAtCompletion bool

	// RetentionInterval is how often the retention loop runs, unless
	// Retention is negative. Zero means 1m; at most 24h; negative is an
	// error.
	RetentionInterval time.Duration

	// RetentionBatch is the most rows one retention statement deletes. Zero
	// means 1000; at most 100000; negative is an error.
	RetentionBatch int

	// TxConcurrency is the most [Transactional] handlers with their
	// transaction open at once; the others wait for a turn before they
	// begin theirs, their claims renewed meanwhile. Each open transaction
	// holds a connection of the worker's pool, which the worker's own
	// claims, completions and renewals need too, and a server accepts only
	// so many (max_connections is 100 by default). Zero means the smaller
	// of Concurrency and 50; at most Concurrency. Either way, on a pool
	// capped with sql.DB.SetMaxOpenConns it is at most the cap minus
	// ReservedConns (and at least 1), so the worker's statements always
	// find a connection. Other handlers that use the pool are not counted:
	// cap their use yourself, or give them a pool of their own.
	TxConcurrency int

	// Logger receives the worker's structured logs. Nil means
	// slog.Default(); pass slog.New(slog.DiscardHandler) for none.
	Logger *slog.Logger
}

// Queue is one queue a worker serves.
type Queue struct {
	// Name is the queue's name. Required; see lease.ValidateQueue.
	Name string
	// Concurrency is the most handlers of this queue running at once, as
	// Config.Concurrency is for a worker of one queue. Zero means
	// Config.Concurrency; at most 10000 (lease.MaxClaimLimit).
	Concurrency int
}

// normalize validates c and fills in its defaults.
func (c Config) normalize() (Config, error) {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("framework: Config.%s is %v; %s", field, v, want)
	}
	switch {
	case c.Concurrency < 0 || c.Concurrency > MaxConcurrency:
		return c, bad("Concurrency", c.Concurrency, fmt.Sprintf("it must be between 1 and %d, or zero for %d", MaxConcurrency, DefaultConcurrency))
	case c.Concurrency == 0:
		c.Concurrency = DefaultConcurrency
	}
	if len(c.Queues) == 0 {
		c.Queues = []Queue{{Name: lease.DefaultQueue}}
	} else {
		c.Queues = slices.Clone(c.Queues)
	}
	seen := map[string]bool{}
	for i := range c.Queues {
		q := &c.Queues[i]
		field := fmt.Sprintf("Queues[%d]", i)
		if err := lease.ValidateQueue(q.Name); err != nil {
			return c, fmt.Errorf("framework: Config.%s.Name: %w", field, err)
		}
		if seen[q.Name] {
			return c, bad(field+".Name", fmt.Sprintf("%q", q.Name), "a queue may be named once")
		}
		seen[q.Name] = true
		switch {
		case q.Concurrency < 0 || q.Concurrency > MaxConcurrency:
			return c, bad(field+".Concurrency", q.Concurrency, fmt.Sprintf("it must be between 1 and %d, or zero for Concurrency (%d)", MaxConcurrency, c.Concurrency))
		case q.Concurrency == 0:
			q.Concurrency = c.Concurrency
		}
	}
	switch {
	case c.Lease != 0 && (c.Lease < MinLease || c.Lease > MaxLease):
		return c, bad("Lease", c.Lease, fmt.Sprintf("it must be between %v and %v, or zero for %v", MinLease, MaxLease, DefaultLease))
	case c.Lease == 0:
		c.Lease = DefaultLease
	}
	switch {
	case c.RenewEvery == 0:
		c.RenewEvery = c.Lease / 3
	case c.RenewEvery < MinRenewEvery || c.RenewEvery > c.Lease/2:
		return c, bad("RenewEvery", c.RenewEvery, fmt.Sprintf("it must be between %v and Lease/2 (%v), or zero for Lease/3", MinRenewEvery, c.Lease/2))
	}
	switch {
	case c.PollInterval != 0 && (c.PollInterval < MinPollInterval || c.PollInterval > MaxPollInterval):
		return c, bad("PollInterval", c.PollInterval, fmt.Sprintf("it must be between %v and %v, or zero for %v", MinPollInterval, MaxPollInterval, DefaultPollInterval))
	case c.PollInterval == 0:
		c.PollInterval = DefaultPollInterval
	}
	switch {
	case c.GracePeriod > MaxGracePeriod:
		return c, bad("GracePeriod", c.GracePeriod, fmt.Sprintf("it must be at most %v; zero means %v, negative none", MaxGracePeriod, DefaultGracePeriod))
	case c.GracePeriod == 0:
		c.GracePeriod = DefaultGracePeriod
	case c.GracePeriod < 0:
		c.GracePeriod = 0
	}
	switch {
	case c.StopTimeout != 0 && (c.StopTimeout < MinStopTimeout || c.StopTimeout > MaxStopTimeout):
		return c, bad("StopTimeout", c.StopTimeout, fmt.Sprintf("it must be between %v and %v, or zero for %v", MinStopTimeout, MaxStopTimeout, DefaultStopTimeout))
	case c.StopTimeout == 0:
		c.StopTimeout = DefaultStopTimeout
	}
	if c.AttemptTimeout < 0 || c.AttemptTimeout > MaxAttemptTimeout {
		return c, bad("AttemptTimeout", c.AttemptTimeout, fmt.Sprintf("it must be between 0 (no timeout) and %v", MaxAttemptTimeout))
	}
	// From here on a zero Retention means DeleteAtCompletion: the worker
	// deletes rows at completion, and its retention loop DISCARDED rows only.
	switch {
	case c.DeleteAtCompletion && c.Retention != 0:
		return c, bad("Retention", c.Retention, "it must be zero with DeleteAtCompletion, which keeps no DONE row")
	case c.DeleteAtCompletion:
	case c.Retention > MaxRetention || (c.Retention > 0 && c.Retention < DedupeWindow):
		return c, bad("Retention", c.Retention, fmt.Sprintf(
			"it must be between %v (DedupeWindow: a completed event's id is refused as a duplicate that long) and %v; "+
				"zero means %v, negative forever; DeleteAtCompletion deletes rows at completion, giving up deduplication after completion",
			DedupeWindow, MaxRetention, DefaultRetention))
	case c.Retention == 0:
		c.Retention = DefaultRetention
	}
	switch {
	case c.RetentionInterval < 0 || c.RetentionInterval > MaxRetentionInterval:
		return c, bad("RetentionInterval", c.RetentionInterval, fmt.Sprintf("it must be between 0 and %v; zero means %v", MaxRetentionInterval, DefaultRetentionInterval))
	case c.RetentionInterval == 0:
		c.RetentionInterval = DefaultRetentionInterval
	}
	switch {
	case c.RetentionBatch < 0 || c.RetentionBatch > MaxRetentionBatch:
		return c, bad("RetentionBatch", c.RetentionBatch, fmt.Sprintf("it must be between 1 and %d, or zero for %d", MaxRetentionBatch, DefaultRetentionBatch))
	case c.RetentionBatch == 0:
		c.RetentionBatch = DefaultRetentionBatch
	}
	switch {
	case c.TxConcurrency < 0 || c.TxConcurrency > c.Concurrency:
		return c, bad("TxConcurrency", c.TxConcurrency, fmt.Sprintf("it must be between 1 and Concurrency (%d), or zero for the smaller of Concurrency and %d", c.Concurrency, DefaultTxConcurrency))
	case c.TxConcurrency == 0:
		c.TxConcurrency = min(c.Concurrency, DefaultTxConcurrency)
	}
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// margin is how much earlier than the last confirmed lease deadline the
// worker gives a claim up on its own: room for clock-rate differences and
// for the handler to notice its cancelled context.
func (c Config) margin() time.Duration { return c.Lease / 10 }

// maxStatementTimeout caps the timeout of one statement, whatever the
// lease: a statement that has not answered in that time is not going to.
const maxStatementTimeout = 30 * time.Second

// statementTimeout bounds one statement, so that a hung connection is
// noticed well within a lease: RenewEvery, between 1s and 30s.
func (c Config) statementTimeout() time.Duration {
	return min(max(c.RenewEvery, time.Second), maxStatementTimeout)
}

func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
