package framework

import (
	"testing"
	"time"
)

// The poll wait of the longest allowed interval, with the largest jitter,
// stays positive and within a fifth of the interval: no overflow can make
// an idle worker poll in a busy loop.
func TestPollJitterWorstCaseStaysPositive(t *testing.T) {
	d := MaxPollInterval
	if got := jittered(d, d/5); got <= 0 || got != d+d/5 {
		t.Errorf("jittered(%v, %v) = %v; want %v", d, d/5, got, d+d/5)
	}
	cfg, err := Config{PollInterval: MaxPollInterval}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: cfg}
	for range 1000 {
		if got := w.pollWait(); got < d || got > d+d/5+1 {
			t.Fatalf("pollWait() = %v at PollInterval %v; want between it and a fifth more", got, d)
		}
	}
	if _, err := (Config{PollInterval: MaxPollInterval + 1}).normalize(); err == nil {
		t.Errorf("PollInterval %v accepted; want it refused", MaxPollInterval+1)
	}
	if _, err := (Config{PollInterval: time.Duration(1<<63 - 1)}).normalize(); err == nil {
		t.Errorf("PollInterval MaxInt64 accepted; want it refused")
	}
}
