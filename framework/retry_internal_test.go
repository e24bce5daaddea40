package framework

import (
	"math"
	"math/rand/v2"
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

// checkDelay fails t if p's delay after attempt is negative or beyond its
// documented bound, (1 + RandomizationFactor) × MaxInterval.
func checkDelay(t *testing.T, p RetryPolicy, attempt int) {
	t.Helper()
	d := p.delay(attempt)
	limit := time.Duration((1+p.RandomizationFactor)*float64(p.MaxInterval)) + 1
	if d < 0 || d > limit || d > 2*MaxRetryInterval+1 {
		t.Fatalf("policy %+v: delay(%d) = %v; want between 0 and %v", p, attempt, d, limit)
	}
}

// Every policy Register accepts gives delays that are never negative and
// never beyond the policy's bound, for any attempt number: the limits make
// the backoff's arithmetic overflow-free.
func TestRetryDelayStaysInRangeForAnyValidPolicy(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	durations := func() time.Duration {
		switch r.IntN(4) {
		case 0:
			return MaxRetryInterval
		case 1:
			return time.Duration(r.Int64N(int64(time.Second))) + 1
		default:
			return time.Duration(r.Int64N(int64(MaxRetryInterval))) + 1
		}
	}
	attempts := []int{1, 2, 3, 31, 32, 63, 64, 65, 999, 1000, 1001, 1e6}
	for range 2000 {
		p := RetryPolicy{
			InitialInterval:     durations(),
			Multiplier:          []float64{0, 1, MaxMultiplier, 1 + r.Float64()*(MaxMultiplier-1)}[r.IntN(4)],
			RandomizationFactor: []float64{0, -1, 1, r.Float64()}[r.IntN(4)],
		}
		if r.IntN(2) == 0 {
			p.MaxInterval = p.InitialInterval + time.Duration(r.Int64N(int64(MaxRetryInterval-p.InitialInterval)+1))
		}
		n, err := p.normalize()
		if err != nil {
			t.Fatalf("policy %+v within the limits refused: %v", p, err)
		}
		for _, a := range attempts {
			checkDelay(t, n, a)
		}
		checkDelay(t, n, 1+r.IntN(1e6))
	}
}

// FuzzRetryPolicyDelay: whatever policy normalize accepts, the delays stay
// in range. The seeds include the policies that overflowed before the
// limits existed; run them with go test, explore with -fuzz.
func FuzzRetryPolicyDelay(f *testing.F) {
	f.Add(int64(math.MaxInt64/2), 0.0, int64(0), 0.0, 2)
	f.Add(int64(time.Second), 0.0, int64(math.MaxInt64), 0.0, 1000)
	f.Add(int64(time.Second), math.NaN(), int64(0), 0.0, 3)
	f.Add(int64(time.Second), 2.0, int64(0), math.NaN(), 3)
	f.Add(int64(time.Second), 1e300, int64(0), 0.0, 5)
	f.Add(int64(MaxRetryInterval), float64(MaxMultiplier), int64(MaxRetryInterval), 1.0, 1000000)
	f.Fuzz(func(t *testing.T, initial int64, multiplier float64, maxInterval int64, factor float64, attempt int) {
		p, err := RetryPolicy{
			InitialInterval:     time.Duration(initial),
			Multiplier:          multiplier,
			MaxInterval:         time.Duration(maxInterval),
			RandomizationFactor: factor,
		}.normalize()
		if err != nil {
			return
		}
		checkDelay(t, p, attempt)
	})
}
