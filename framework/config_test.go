package framework_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
)

func TestNewRejectsBadConfig(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	db := pgtest.Open(t, drv)
	cases := []struct {
		cfg  framework.Config
		want string
	}{
		{framework.Config{Concurrency: -1}, "Config.Concurrency is -1; it must be between 1 and 10000"},
		{framework.Config{Concurrency: 10001}, "Config.Concurrency"},
		{framework.Config{Lease: time.Millisecond}, "Config.Lease is 1ms; it must be between 100ms and 24h0m0s"},
		{framework.Config{Lease: -time.Second}, "Config.Lease"},
		{framework.Config{Lease: time.Second, RenewEvery: 600 * time.Millisecond}, "Config.RenewEvery is 600ms; it must be between 10ms and Lease/2 (500ms)"},
		{framework.Config{RenewEvery: time.Millisecond}, "Config.RenewEvery"},
		{framework.Config{PollInterval: time.Millisecond}, "Config.PollInterval is 1ms; it must be between 10ms and 24h0m0s"},
		{framework.Config{PollInterval: math.MaxInt64}, "Config.PollInterval is 2562047h47m16.854775807s; it must be between 10ms and 24h0m0s"},
		{framework.Config{Lease: 25 * time.Hour}, "Config.Lease is 25h0m0s; it must be between 100ms and 24h0m0s"},
		{framework.Config{GracePeriod: math.MaxInt64}, "Config.GracePeriod"},
		{framework.Config{StopTimeout: time.Millisecond}, "Config.StopTimeout is 1ms; it must be between 100ms and 10m0s"},
		{framework.Config{StopTimeout: time.Hour}, "Config.StopTimeout"},
		{framework.Config{StopTimeout: -1}, "Config.StopTimeout"},
		{framework.Config{AttemptTimeout: math.MaxInt64}, "Config.AttemptTimeout"},
		{framework.Config{Retention: math.MaxInt64}, "Config.Retention"},
		{framework.Config{Retention: time.Hour}, "Config.Retention is 1h0m0s; it must be between 24h0m0s (DedupeWindow: a completed event's id is refused as a duplicate that long)"},
		{framework.Config{Retention: framework.DedupeWindow - time.Microsecond}, "Config.Retention"},
		{framework.Config{Retention: time.Hour, DeleteAtCompletion: true}, "Config.Retention is 1h0m0s; it must be zero with DeleteAtCompletion"},
		{framework.Config{Retention: -1, DeleteAtCompletion: true}, "it must be zero with DeleteAtCompletion"},
		{framework.Config{RetentionInterval: 25 * time.Hour}, "Config.RetentionInterval"},
		{framework.Config{RetentionBatch: framework.MaxRetentionBatch + 1}, "Config.RetentionBatch"},
		{framework.Config{AttemptTimeout: -1}, "Config.AttemptTimeout"},
		{framework.Config{RetentionInterval: -1}, "Config.RetentionInterval"},
		{framework.Config{RetentionBatch: -1}, "Config.RetentionBatch"},
		{framework.Config{TxConcurrency: -1}, "Config.TxConcurrency is -1; it must be between 1 and Concurrency (1000)"},
		{framework.Config{Concurrency: 5, TxConcurrency: 6}, "Config.TxConcurrency is 6; it must be between 1 and Concurrency (5)"},
		{framework.Config{Table: "bad name"}, "Options.Table"},
	}
	for _, c := range cases {
		w, err := framework.New(db, drv, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, %v; want an error containing %q", c.cfg, w, err, c.want)
		}
	}
	if _, err := framework.New(nil, drv, framework.Config{}); err == nil || !strings.Contains(err.Error(), "db is nil") {
		t.Errorf("New(nil db) = %v; want an error naming the db", err)
	}
	if _, err := framework.New(db, nil, framework.Config{}); err == nil || !strings.Contains(err.Error(), "driver is nil") {
		t.Errorf("New(nil driver) = %v; want an error naming the driver", err)
	}
}

// nilHandler is a handler type whose nil pointer panics when called.
type nilHandler struct{ next leasework.Handler }

func (h *nilHandler) Handle(ctx context.Context, c *leasework.Claim) error {
	return h.next.Handle(ctx, c)
}

func TestRegisterAndRunRejectMisuse(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	w, err := framework.New(pgtest.Open(t, drv), drv, framework.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no handler") {
		t.Errorf("Run with no handler = %v; want an error", err)
	}
	ok := leasework.HandlerFunc(func(context.Context, *leasework.Claim) error { return nil })
	cases := []struct {
		kind   string
		h      leasework.Handler
		policy framework.RetryPolicy
		want   string
	}{
		{"", ok, framework.RetryPolicy{}, "kind is empty"},
		{"k", nil, framework.RetryPolicy{}, "handler is nil"},
		{"k", leasework.HandlerFunc(nil), framework.RetryPolicy{}, "handler is nil (leasework.HandlerFunc)"},
		{"k", (*nilHandler)(nil), framework.RetryPolicy{}, "handler is nil (*framework_test.nilHandler)"},
		{"bad\x00kind", ok, framework.RetryPolicy{}, "NUL byte"},
		{"bad\xffkind", ok, framework.RetryPolicy{}, "not valid UTF-8"},
		{strings.Repeat("k", 256), ok, framework.RetryPolicy{}, "at most 255"},
		{"k", ok, framework.RetryPolicy{InitialInterval: -1}, "RetryPolicy.InitialInterval"},
		{"k", ok, framework.RetryPolicy{Multiplier: 0.5}, "RetryPolicy.Multiplier is 0.5; it must be at least 1"},
		{"k", ok, framework.RetryPolicy{InitialInterval: time.Minute, MaxInterval: time.Second}, "RetryPolicy.MaxInterval"},
		{"k", ok, framework.RetryPolicy{RandomizationFactor: 1.5}, "RetryPolicy.RandomizationFactor"},
		{"k", ok, framework.RetryPolicy{MaxAttempts: -1}, "RetryPolicy.MaxAttempts"},
	}
	for _, c := range cases {
		if err := w.Register(c.kind, c.h, c.policy); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register(%q, %v, %+v) = %v; want an error containing %q", c.kind, c.h, c.policy, err, c.want)
		}
	}
	if err := w.Register("k", ok, framework.RetryPolicy{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Register("k", ok, framework.RetryPolicy{}); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate Register = %v; want an error", err)
	}

	w.StopNow() // Run stops at once
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("Run after StopNow = %v; want nil", err)
	}
	if err := w.Register("late", ok, framework.RetryPolicy{}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("Register after Run = %v; want an error", err)
	}
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already run") {
		t.Errorf("second Run = %v; want an error", err)
	}
}
