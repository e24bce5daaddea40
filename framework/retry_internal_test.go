package framework

import (
	"testing"
	"time"
)

func TestRetryPolicyDelay(t *testing.T) {
	p, err := RetryPolicy{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if p.InitialInterval != time.Second || p.Multiplier != 2 || p.MaxInterval != 100*time.Second || p.RandomizationFactor != 0.2 {
		t.Errorf("defaults %+v; want 1s, ×2, max 100s, ±0.2", p)
	}
	exact, err := RetryPolicy{InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second, RandomizationFactor: -1}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 1e6: 10 * time.Second} {
		if got := exact.delay(attempt); got != want {
			t.Errorf("exact delay(%d) = %v; want %v", attempt, got, want)
		}
	}
	for attempt := 1; attempt <= 9; attempt++ {
		b := float64(min(time.Second<<(attempt-1), 100*time.Second))
		for range 50 {
			if d := float64(p.delay(attempt)); d < 0.8*b || d > 1.2*b+1 {
				t.Fatalf("default delay(%d) = %v; want within ±20%% of %v", attempt, time.Duration(d), time.Duration(b))
			}
		}
	}
}
