package framework_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/framework"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
	"go.uber.org/goleak"
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
	if st.Rows[leasework.StatusDone] != 2 || st.Rows[leasework.StatusFailed] != 1 || st.Rows[leasework.StatusReady] != 1 || st.Eligible != 0 {
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
		`leasework_claim_errors_total{worker="w\"1"} 0` + "\n",
		`leasework_outcomes_replayed_total{worker="w\"1"} 0` + "\n",
		`leasework_hung_handlers_total{worker="w\"1"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	// A gauge for every status, zero ones included.
	for _, status := range leasework.Statuses() {
		if want := `leasework_events{table="` + s.Schema() + `.events",status="` + string(status) + `"} `; !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// The package registers nothing on the default mux: importing it (expvar
// did) must not serve /debug/vars, or anything else, in a user's program.
func TestNothingRegisteredOnTheDefaultMux(t *testing.T) {
	for _, path := range []string{"/debug/vars", "/debug/pprof/", "/metrics", "/"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if _, pattern := http.DefaultServeMux.Handler(r); pattern != "" {
			t.Errorf("the default mux serves %s (pattern %q) in a program that imports framework", path, pattern)
		}
	}
}

// The retention loop deletes DONE rows once they are older than Retention,
// in batches, and keeps FAILED rows and younger DONE rows. Age is a fixture
// (finished_at moved into the past), never a wait.
func TestRetentionDeletesOldDoneRows(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgtest.Drivers[0].New())
	ids := pgtest.Enqueue(t, s, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "ok"}, lease.Event{Kind: "bad"})
	w := newWorker(t, s, framework.Config{Retention: framework.DedupeWindow, RetentionInterval: 20 * time.Millisecond, RetentionBatch: 2})
	register(t, w, "ok", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	register(t, w, "bad", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error {
		return leasework.Permanent(context.Canceled)
	})
	start(t, w)
	waitFor(t, "three completions and the failure recorded", func() bool {
		c := w.Counters()
		return c.Completed == 3 && c.Failed == 1
	})
	// Two of the DONE rows (and the FAILED one) finished a window and a
	// minute ago; the third just now.
	for _, r := range []lease.Enqueued{ids[0], ids[1], ids[3]} {
		execSQL(t, s, `UPDATE `+s.QualifiedTable()+` SET finished_at = finished_at - $2 * interval '1 microsecond' WHERE id = $1`,
			r.ID, (framework.DedupeWindow + time.Minute).Microseconds())
	}
	waitFor(t, "the two old DONE rows deleted", func() bool { return w.Counters().RetentionDeleted == 2 })
	st, err := w.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[leasework.StatusDone] != 1 || st.Rows[leasework.StatusFailed] != 1 {
		t.Errorf("stats %+v; want the young DONE row and the FAILED one kept", st)
	}
	if r, err := s.Get(ctx, ids[2].ID); err != nil || r.Status != leasework.StatusDone {
		t.Errorf("young DONE row = %+v, %v; want kept", r, err)
	}
	if r, err := s.Get(ctx, ids[3].ID); err != nil || r.Status != leasework.StatusFailed {
		t.Errorf("failed row = %+v, %v; want kept", r, err)
	}
}

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A worker on a table that was never migrated says so: with no Logger it
// logs to slog.Default() a claim error naming the fix, and counts claim
// errors in its metrics.
func TestUnmigratedTableIsReported(t *testing.T) {
	drv := pgtest.Drivers[0].New()
	db := pgtest.Open(t, drv)
	var logs syncBuffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	ignore := goleak.IgnoreCurrent()
	w, err := framework.New(db, drv, framework.Config{Schema: pgtest.SchemaName(), PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	register(t, w, "k", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	stop := start(t, w)
	waitFor(t, "two claim errors", func() bool { return w.Counters().ClaimErrors >= 2 })
	stop()
	goleak.VerifyNone(t, ignore)
	if c := w.Counters(); c.ClaimErrors != c.ClaimQueries || c.Claimed != 0 {
		t.Errorf("counters %+v; want every claim counted as failed", c)
	}
	if !strings.Contains(logs.String(), "claim failed") || !strings.Contains(logs.String(), "leasework migrate") {
		t.Errorf("default logger got:\n%s\nwant a claim failure naming leasework migrate", logs.String())
	}
	rec := httptest.NewRecorder()
	w.MetricsHandler(time.Second).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := fmt.Sprintf("leasework_claim_errors_total{worker=%q} %d\n", w.ID(), w.Counters().ClaimErrors)
	if !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics lack %q:\n%s", want, rec.Body.String())
	}
}

// The metrics give each concurrency limit's figures, read from the
// database at the scrape: its live attempts, its maximum and the due rows
// it holds back; and the worker's claims that a limit held back. Without
// the limits' table, leasework_limits_up is 0 and the rest is served.
func TestLimitMetrics(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgtest.Drivers[0].New())
	if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeKind, Name: "slow", Max: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetLimit(ctx, lease.Limit{Scope: lease.ScopeQueue, Name: `q"x`, Max: 7}, "test"); err != nil {
		t.Fatal(err)
	}
	// The slow rows first: a claim takes one of them, then the fast ones
	// past the two its limit holds back.
	pgtest.Enqueue(t, s, lease.Event{Kind: "slow"}, lease.Event{Kind: "slow"}, lease.Event{Kind: "slow"},
		lease.Event{Kind: "fast"}, lease.Event{Kind: "fast"})
	w := newWorker(t, s, framework.Config{WorkerID: "w1", Concurrency: 10})
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	register(t, w, "slow", framework.RetryPolicy{}, func(ctx context.Context, _ *leasework.Claim) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	register(t, w, "fast", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	stop := start(t, w)
	defer stop()
	waitFor(t, "a slow handler started and both fast events completed", func() bool {
		return len(started) == 1 && w.Counters().Completed == 2
	})
	scrape := func() string {
		rec := httptest.NewRecorder()
		w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	held := w.Counters().ClaimsHeldBack
	if held < 1 {
		t.Errorf("ClaimsHeldBack = %d; want at least 1: the claim that took the fast events past the held slow ones", held)
	}
	table := s.Schema() + ".events"
	for _, want := range []string{
		"# TYPE leasework_claims_held_back_total counter\n",
		fmt.Sprintf(`leasework_claims_held_back_total{worker="w1"} %d`+"\n", held),
		`leasework_limits_up{table="` + table + `"} 1` + "\n",
		"# TYPE leasework_limit_live gauge\n",
		`leasework_limit_live{table="` + table + `",scope="kind",name="slow"} 1` + "\n",
		`leasework_limit_max{table="` + table + `",scope="kind",name="slow"} 1` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="kind",name="slow"} 2` + "\n",
		`leasework_limit_live{table="` + table + `",scope="queue",name="q\"x"} 0` + "\n",
		`leasework_limit_max{table="` + table + `",scope="queue",name="q\"x"} 7` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="queue",name="q\"x"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}

	// The slow events run one at a time, the limit's figures with them.
	close(release)
	waitFor(t, "every event completed", func() bool { return w.Counters().Completed == 5 })
	stop()
	body = scrape()
	for _, want := range []string{
		`leasework_limit_live{table="` + table + `",scope="kind",name="slow"} 0` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="kind",name="slow"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics once every event completed lack %q:\n%s", want, body)
		}
	}

	execSQL(t, s, `DROP TABLE `+ident(s.Schema())+`.`+ident(s.Table()+"_limits")+` CASCADE`)
	body = scrape()
	for _, want := range []string{
		`leasework_limits_up{table="` + table + `"} 0` + "\n",
		`leasework_stats_up{table="` + table + `"} 1` + "\n",
		`leasework_completed_total{worker="w1"} 5` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics without the limits' table lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "leasework_limit_live{") {
		t.Errorf("metrics without the limits' table give a limit's figures:\n%s", body)
	}
}

// The metrics give the partition limits' figures, labelled scope
// "partition": a partition's own limit by its name, the default of the
// partitions by an empty name, with the live attempts of every partition
// under it; held back counts the rows each set aside.
func TestPartitionLimitMetrics(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgtest.Drivers[0].New())
	for _, l := range []lease.Limit{{Scope: lease.ScopePartition, Name: "", Max: 1}, {Scope: lease.ScopePartition, Name: "acme", Max: 2}} {
		if _, err := s.SetLimit(ctx, l, "test"); err != nil {
			t.Fatal(err)
		}
	}
	var es []lease.Event
	for _, p := range []string{"acme", "acme", "acme", "beta", "beta", "gamma"} {
		es = append(es, lease.Event{Kind: "slow", Partition: p})
	}
	pgtest.Enqueue(t, s, es...)
	w := newWorker(t, s, framework.Config{WorkerID: "w1", Concurrency: 10})
	release := make(chan struct{})
	started := make(chan struct{}, len(es))
	register(t, w, "slow", framework.RetryPolicy{}, func(ctx context.Context, _ *leasework.Claim) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	stop := start(t, w)
	defer stop()
	// acme's 2, beta's 1 and gamma's 1 run; acme's third and beta's second
	// are set aside.
	heldBack := func() map[string]int64 {
		ls, err := s.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, l := range ls {
			out[l.Name] = l.HeldBack
		}
		return out
	}
	waitFor(t, "4 handlers started and 2 rows set aside", func() bool {
		h := heldBack()
		return len(started) == 4 && h["acme"] == 1 && h[""] == 1
	})
	scrape := func() string {
		rec := httptest.NewRecorder()
		w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	table := s.Schema() + ".events"
	for _, want := range []string{
		`leasework_limits_up{table="` + table + `"} 1` + "\n",
		`leasework_limit_live{table="` + table + `",scope="partition",name="acme"} 2` + "\n",
		`leasework_limit_max{table="` + table + `",scope="partition",name="acme"} 2` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="partition",name="acme"} 1` + "\n",
		`leasework_limit_live{table="` + table + `",scope="partition",name=""} 2` + "\n",
		`leasework_limit_max{table="` + table + `",scope="partition",name=""} 1` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="partition",name=""} 1` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}

	close(release)
	waitFor(t, "every event completed", func() bool { return w.Counters().Completed == int64(len(es)) })
	stop()
	body = scrape()
	for _, want := range []string{
		`leasework_limit_live{table="` + table + `",scope="partition",name="acme"} 0` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="partition",name="acme"} 0` + "\n",
		`leasework_limit_live{table="` + table + `",scope="partition",name=""} 0` + "\n",
		`leasework_limit_held_back{table="` + table + `",scope="partition",name=""} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics once every event completed lack %q:\n%s", want, body)
		}
	}
}

// The metrics give each rate limit's starts in its window and its most,
// labelled by scope and name, read at the scrape, and a partition's rows
// set aside: a worker starts two of three events under a kind's limit of
// 2 an hour, and the third waits READY; it starts one of partition acme's
// two under acme's limit of 1 an hour, and the second is set aside; the
// default of the partitions counts no start. Without the rate limits'
// tables, leasework_rate_limits_up is 0 and the rest is served.
func TestRateLimitMetrics(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgtest.Drivers[0].New())
	for _, l := range []lease.RateLimit{
		{Scope: lease.ScopeKind, Name: "sms", Max: 2, Per: time.Hour}, {Scope: lease.ScopeQueue, Name: `q"x`, Max: 100, Per: time.Minute},
		{Scope: lease.ScopePartition, Name: "acme", Max: 1, Per: time.Hour}, {Scope: lease.ScopePartition, Name: "", Max: 5, Per: time.Minute},
	} {
		if _, _, err := s.SetRateLimit(ctx, l, "test"); err != nil {
			t.Fatal(err)
		}
	}
	in := pgtest.Enqueue(t, s, lease.Event{Kind: "sms"}, lease.Event{Kind: "sms"}, lease.Event{Kind: "sms"},
		lease.Event{Kind: "job", Partition: "acme"}, lease.Event{Kind: "job", Partition: "acme"})
	w := newWorker(t, s, framework.Config{WorkerID: "w1", Concurrency: 10})
	register(t, w, "sms", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	register(t, w, "job", framework.RetryPolicy{}, func(context.Context, *leasework.Claim) error { return nil })
	stop := start(t, w)
	defer stop()
	waitFor(t, "three events completed", func() bool { return w.Counters().Completed == 3 })
	if r, err := s.Get(ctx, in[2].ID); err != nil || r.Status != leasework.StatusReady {
		t.Fatalf("the third event: %s, %v; want READY, held by the rate limit", r.Status, err)
	}
	waitFor(t, "acme's second event set aside", func() bool {
		r, err := s.Get(ctx, in[4].ID)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status == leasework.StatusWaiting
	})
	scrape := func() string {
		rec := httptest.NewRecorder()
		w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	table := s.Schema() + ".events"
	for _, want := range []string{
		`leasework_rate_limits_up{table="` + table + `"} 1` + "\n",
		"# TYPE leasework_rate_limit_recent gauge\n",
		`leasework_rate_limit_recent{table="` + table + `",scope="kind",name="sms"} 2` + "\n",
		`leasework_rate_limit_max{table="` + table + `",scope="kind",name="sms"} 2` + "\n",
		`leasework_rate_limit_recent{table="` + table + `",scope="queue",name="q\"x"} 0` + "\n",
		`leasework_rate_limit_max{table="` + table + `",scope="queue",name="q\"x"} 100` + "\n",
		`leasework_rate_limit_recent{table="` + table + `",scope="partition",name="acme"} 1` + "\n",
		`leasework_rate_limit_max{table="` + table + `",scope="partition",name="acme"} 1` + "\n",
		"# TYPE leasework_rate_limit_held_back gauge\n",
		`leasework_rate_limit_held_back{table="` + table + `",scope="partition",name="acme"} 1` + "\n",
		`leasework_rate_limit_recent{table="` + table + `",scope="partition",name=""} 0` + "\n",
		`leasework_rate_limit_max{table="` + table + `",scope="partition",name=""} 5` + "\n",
		`leasework_rate_limit_held_back{table="` + table + `",scope="partition",name=""} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	for _, bad := range []string{`leasework_rate_limit_held_back{table="` + table + `",scope="kind"`, `leasework_rate_limit_held_back{table="` + table + `",scope="queue"`} {
		if strings.Contains(body, bad) {
			t.Errorf("metrics give a held back for a kind's or a queue's rate limit (%s), whose rows held back stay READY and are not counted:\n%s", bad, body)
		}
	}
	stop()

	for _, suffix := range []string{"_rate_shares", "_rate_limits"} {
		execSQL(t, s, `DROP TABLE `+ident(s.Schema())+`.`+ident(s.Table()+suffix))
	}
	body = scrape()
	for _, want := range []string{
		`leasework_rate_limits_up{table="` + table + `"} 0` + "\n",
		`leasework_limits_up{table="` + table + `"} 1` + "\n",
		`leasework_completed_total{worker="w1"} 3` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics without the rate limits' tables lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "leasework_rate_limit_recent{") {
		t.Errorf("metrics without the rate limits' tables give a rate limit's figures:\n%s", body)
	}
}

// The metrics give each fair queue's partitions served now, each weight
// (partition "" for a queue's default) and each queue's priority aging,
// labelled by queue (and partition), read at the scrape: a claim of the
// default queue's partitions brings two in. Without fair scheduling's
// tables, leasework_fair_up is 0 and the rest is served.
func TestFairMetrics(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgtest.Drivers[0].New())
	for _, wt := range []lease.Weight{{Weight: 1}, {Partition: `a"x`, Weight: 3}, {Queue: "other", Partition: "p", Weight: 2}} {
		if _, err := s.SetWeight(ctx, wt, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetAging(ctx, "", 10*time.Minute, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAging(ctx, `q"y`, 1500*time.Millisecond, "test"); err != nil {
		t.Fatal(err)
	}
	pgtest.Enqueue(t, s, lease.Event{Kind: "k", Partition: `a"x`}, lease.Event{Kind: "k", Partition: `a"x`}, lease.Event{Kind: "k", Partition: "b"})
	if claims, err := s.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute}); err != nil || len(claims) != 1 {
		t.Fatalf("claim = %d claims, %v; want 1", len(claims), err)
	}
	w := newWorker(t, s, framework.Config{WorkerID: "w1"})
	scrape := func() string {
		rec := httptest.NewRecorder()
		w.MetricsHandler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	table := s.Schema() + ".events"
	for _, want := range []string{
		`leasework_fair_up{table="` + table + `"} 1` + "\n",
		"# TYPE leasework_fair_partitions_active gauge\n",
		`leasework_fair_partitions_active{table="` + table + `",queue="default"} 2` + "\n",
		"# TYPE leasework_fair_weight gauge\n",
		`leasework_fair_weight{table="` + table + `",queue="default",partition=""} 1` + "\n",
		`leasework_fair_weight{table="` + table + `",queue="default",partition="a\"x"} 3` + "\n",
		`leasework_fair_weight{table="` + table + `",queue="other",partition="p"} 2` + "\n",
		"# TYPE leasework_priority_aging_seconds gauge\n",
		`leasework_priority_aging_seconds{table="` + table + `",queue="default"} 600` + "\n",
		`leasework_priority_aging_seconds{table="` + table + `",queue="q\"y"} 1.5` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	// Queue other has a partition's weight but no default: it is not
	// fair, and has no partitions served.
	if strings.Contains(body, `leasework_fair_partitions_active{table="`+table+`",queue="other"}`) {
		t.Errorf("metrics give partitions served for queue other, which is not fair:\n%s", body)
	}

	for _, suffix := range []string{"_queue_aging", "_fair_arrivals", "_fair_keys", "_fair_weights"} {
		execSQL(t, s, `DROP TABLE `+ident(s.Schema())+`.`+ident(s.Table()+suffix))
	}
	body = scrape()
	for _, want := range []string{
		`leasework_fair_up{table="` + table + `"} 0` + "\n",
		`leasework_rate_limits_up{table="` + table + `"} 1` + "\n",
		`leasework_limits_up{table="` + table + `"} 1` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics without fair scheduling's tables lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "leasework_fair_weight{") || strings.Contains(body, "leasework_priority_aging_seconds{") {
		t.Errorf("metrics without fair scheduling's tables give weights or agings:\n%s", body)
	}
}
