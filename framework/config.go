package framework

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Defaults of [Config]; a zero field takes the value here.
const (
	DefaultConcurrency       = 10
	DefaultLease             = 30 * time.Second
	DefaultPollInterval      = time.Second
	DefaultGracePeriod       = 10 * time.Second
	DefaultRetentionInterval = time.Minute
	DefaultRetentionBatch    = 1000
)

// Limits of [Config] fields.
const (
	MaxConcurrency  = 10000
	MinLease        = 100 * time.Millisecond
	MinPollInterval = 10 * time.Millisecond
	MinRenewEvery   = 10 * time.Millisecond
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
	// rows this worker claims at once. Zero means 10; at most 10000.
	Concurrency int

	// Lease is how long a claim is owned without renewal before another
	// worker may take the row. Zero means 30s; at least 100ms.
	Lease time.Duration

	// RenewEvery is how often live claims are renewed, all of them with one
	// statement. Zero means Lease/3; between 10ms and Lease/2, so that a
	// claim is renewed at least once before the worker gives it up.
	RenewEvery time.Duration

	// PollInterval is how long an idle worker waits before it looks for
	// work again when no notification wakes it. Each wait adds a random
	// jitter of up to a fifth of it, so a worker never polls faster than
	// PollInterval. Zero means 1s; at least 10ms.
	PollInterval time.Duration

	// GracePeriod is how long a stopping worker lets running handlers
	// finish before it cancels their contexts with leasework.ErrShutdown.
	// Zero means 10s; negative means no grace: cancel at once.
	GracePeriod time.Duration

	// AttemptTimeout bounds one attempt: past it the handler's context is
	// cancelled with leasework.ErrAttemptTimeout. Zero means no timeout;
	// negative is an error.
	AttemptTimeout time.Duration

	// Retention is how long a DONE row is kept. Zero means none: the
	// completion deletes the row in the same guarded statement. Negative
	// means forever. Positive rows are deleted by a background loop every
	// RetentionInterval, in batches of RetentionBatch. FAILED rows are
	// always kept, for repair.
	Retention time.Duration

	// RetentionInterval is how often the retention loop runs when Retention
	// is positive. Zero means 1m; negative is an error.
	RetentionInterval time.Duration

	// RetentionBatch is the most rows one retention statement deletes. Zero
	// means 1000; negative is an error.
	RetentionBatch int

	// Logger receives the worker's structured logs. Nil means none.
	Logger *slog.Logger
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
	switch {
	case c.Lease != 0 && c.Lease < MinLease:
		return c, bad("Lease", c.Lease, fmt.Sprintf("it must be at least %v, or zero for %v", MinLease, DefaultLease))
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
	case c.PollInterval != 0 && c.PollInterval < MinPollInterval:
		return c, bad("PollInterval", c.PollInterval, fmt.Sprintf("it must be at least %v, or zero for %v", MinPollInterval, DefaultPollInterval))
	case c.PollInterval == 0:
		c.PollInterval = DefaultPollInterval
	}
	switch {
	case c.GracePeriod == 0:
		c.GracePeriod = DefaultGracePeriod
	case c.GracePeriod < 0:
		c.GracePeriod = 0
	}
	if c.AttemptTimeout < 0 {
		return c, bad("AttemptTimeout", c.AttemptTimeout, "it must be positive, or zero for none")
	}
	switch {
	case c.RetentionInterval < 0:
		return c, bad("RetentionInterval", c.RetentionInterval, fmt.Sprintf("it must be positive, or zero for %v", DefaultRetentionInterval))
	case c.RetentionInterval == 0:
		c.RetentionInterval = DefaultRetentionInterval
	}
	switch {
	case c.RetentionBatch < 0:
		return c, bad("RetentionBatch", c.RetentionBatch, fmt.Sprintf("it must be positive, or zero for %d", DefaultRetentionBatch))
	case c.RetentionBatch == 0:
		c.RetentionBatch = DefaultRetentionBatch
	}
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// margin is how much earlier than the last confirmed lease deadline the
// worker gives a claim up on its own: room for clock-rate differences and
// for the handler to notice its cancelled context.
func (c Config) margin() time.Duration { return c.Lease / 10 }

func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
