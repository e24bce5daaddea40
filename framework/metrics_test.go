package framework_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestCountersStatsAndMetrics(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	pgtest.Enqueue(t, s, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "bad"}, lease.Event{Kind: "idle", RunAt: time.Now().Add(time.Hour)})
	w := newWorker(t, s, framework.Config{WorkerID: `w"1`})
	register(t, w, "ok", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	register(t, w, "bad", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		return leasework.Permanent(context.Canceled)
	})
	stop := start(t, w)
	waitFor(t, "three outcomes", func() bool { c := w.Counters(); return c.Completed == 2 && c.Failed == 1 })
	stop()

	st, err := w.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Done != 2 || st.Failed != 1 || st.Ready != 1 || st.Eligible != 0 {
		t.Errorf("stats %+v; want 2 done, 1 failed, 1 ready not yet due", st)
	}

	rec := httptest.NewRecorder()
	w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"# TYPE leasework_completed_total counter\n",
		`leasework_completed_total{worker="w\"1"} 2` + "\n",
		`leasework_failed_total{worker="w\"1"} 1` + "\n",
		`leasework_stats_up{table="` + s.Schema() + `.events"} 1` + "\n",
		`leasework_events{table="` + s.Schema() + `.events",status="DONE"} 2` + "\n",
		"leasework_expired_claims{",
		"leasework_oldest_eligible_age_seconds{",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}

	var c framework.Counters
	if err := json.Unmarshal([]byte(w.Expvar().String()), &c); err != nil || c != w.Counters() {
		t.Errorf("expvar = %s, %v; want the counters as JSON", w.Expvar().String(), err)
	}
}

func TestRetentionDeletesOldDoneRows(t *testing.T) {
	s := newStore(t, pgtest.Drivers[0].New())
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "bad"})
	w := newWorker(t, s, framework.Config{Retention: time.Millisecond, RetentionInterval: 20 * time.Millisecond, RetentionBatch: 2})
	register(t, w, "ok", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	register(t, w, "bad", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		return leasework.Permanent(context.Canceled)
	})
	start(t, w)
	waitFor(t, "three DONE rows deleted", func() bool { return w.Counters().RetentionDeleted == 3 })
	st, err := w.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Done != 0 || st.Failed != 1 {
		t.Errorf("stats %+v; want no DONE row left and the FAILED one kept", st)
	}
	if r, err := s.Get(context.Background(), ids[3].ID); err != nil || r.Status != leasework.StatusFailed {
		t.Errorf("failed row = %+v, %v; want kept", r, err)
	}
}
