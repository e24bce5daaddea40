package framework

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// Counters are the worker's in-process figures since it was made. Every
// field only grows.
type Counters struct {
	ClaimQueries       int64 // claim statements sent
	ClaimErrors        int64 // of ClaimQueries, those that failed (logged with the store's error)
	Claimed            int64 // claims taken
	Reclaimed          int64 // claims of rows whose previous owner's lease had expired
	Completed          int64 // events completed (DONE, or deleted with DeleteAtCompletion)
	Retried            int64 // attempts failed and scheduled to run again
	Snoozed            int64 // attempts that asked to run again later (leasework.Snooze): not failures
	Failed             int64 // events ended FAILED: permanent error or spent budget
	Released           int64 // claims given back to READY at shutdown
	StaleRejections    int64 // outcome writes the database rejected: the claim was no longer owned
	OutcomesReplayed   int64 // outcome writes found already recorded by an earlier try whose reply was lost (also counted as Completed, Retried, ...)
	LeasesLost         int64 // handlers cancelled with a cause matching leasework.ErrLeaseLost
	LocalLeaseTimeouts int64 // of LeasesLost, those given up because no renewal was confirmed in time (cause leasework.ErrLeaseUnconfirmed)
	Cancelled          int64 // of LeasesLost, those whose event was cancelled from outside (cause leasework.ErrCancelled)
	Panics             int64 // handler panics, recorded as the attempt's error
	OutcomeWriteErrors int64 // failed writes of the outcomes of one op in one batch; they were tried again, or abandoned
	OutcomesAbandoned  int64 // outcomes never written because of database errors or the stop's timeout
	// RerunsFromAbandonedOutcomes counts, of OutcomesAbandoned, the
	// completions and failures: each is a handler that ran to its end and
	// whose event runs again once the claim's lease expires (unless a
	// Transactional handler's COMMIT, reported failed, did commit). A worker
	// gives such an outcome up only when its lease can no longer be
	// confirmed (the database away past the claim's local deadline), when
	// the database refuses it, or when its stop's StopTimeout runs out; so
	// outside those, it stays zero.
	RerunsFromAbandonedOutcomes int64
	HungHandlers                int64 // handlers that had not returned when their claim was given up after their context ended (attempt timeout, shutdown): left to expire
	RetentionDeleted            int64 // finished rows deleted by the retention loop
	// ClaimsHeldBack counts, of ClaimQueries, those that a concurrency
	// or rate limit kept from rows they would otherwise have taken
	// (lease.Store.ClaimHeldBack), among those that took rows: a claim
	// that took none reports nothing, so a limit that holds back every
	// row of a worker's queue does not count here. The limits' own
	// figures, held-back rows included, are [lease.Store.Limits]'s.
	ClaimsHeldBack int64
}

type counters struct {
	claimQueries, claimErrors, claimsHeldBack, claimed, reclaimed, outcomesReplayed, leasesLost, localLeaseTimeouts,
	cancelled, panics, outcomeWriteErrors, rerunsFromAbandonedOutcomes, hungHandlers, retentionDeleted atomic.Int64
	outcomes [numOutcomes]atomic.Int64 // settlements per Outcome (abandoned: of outcomes a handler returned)
}

// Counters returns a snapshot of the worker's counters.
func (w *Worker) Counters() Counters {
	c := &w.count
	return Counters{
		ClaimQueries:                c.claimQueries.Load(),
		ClaimErrors:                 c.claimErrors.Load(),
		ClaimsHeldBack:              c.claimsHeldBack.Load(),
		Claimed:                     c.claimed.Load(),
		Reclaimed:                   c.reclaimed.Load(),
		Completed:                   c.outcomes[OutcomeCompleted].Load(),
		Retried:                     c.outcomes[OutcomeRetried].Load(),
		Snoozed:                     c.outcomes[OutcomeSnoozed].Load(),
		Failed:                      c.outcomes[OutcomeFailed].Load(),
		Released:                    c.outcomes[OutcomeReleased].Load(),
		StaleRejections:             c.outcomes[OutcomeRejected].Load(),
		OutcomesReplayed:            c.outcomesReplayed.Load(),
		LeasesLost:                  c.leasesLost.Load(),
		LocalLeaseTimeouts:          c.localLeaseTimeouts.Load(),
		Cancelled:                   c.cancelled.Load(),
		Panics:                      c.panics.Load(),
		OutcomeWriteErrors:          c.outcomeWriteErrors.Load(),
		OutcomesAbandoned:           c.outcomes[OutcomeAbandoned].Load(),
		RerunsFromAbandonedOutcomes: c.rerunsFromAbandonedOutcomes.Load(),
		HungHandlers:                c.hungHandlers.Load(),
		RetentionDeleted:            c.retentionDeleted.Load(),
	}
}

// Stats reads the table's database-side figures in one query: rows per
// status, the age of the oldest claimable event, and the count of expired
// claims. They cover every worker on the table. It scans the table: call it
// at scrape rates, not per event.
func (w *Worker) Stats(ctx context.Context) (lease.Stats, error) {
	return w.store.Stats(ctx)
}

// MetricsHandler returns an http.Handler that serves the worker's counters,
// its series per kind and queue (claims, outcomes, and histograms of queue
// wait and run time), the table's [Worker.Stats], and each concurrency
// limit's figures ([lease.Store.Limits]: leasework_limit_live,
// leasework_limit_max and leasework_limit_held_back, labelled by scope
// (kind, queue or partition) and name: a partition's limit is named by
// its partition, and the default limit of the partitions has an empty
// name, its live and held-back figures those of every partition under it),
// and each rate limit's ([lease.Store.RateLimits]: leasework_rate_limit_recent,
// the starts in the window that ends now, and leasework_rate_limit_max,
// labelled by scope (kind, queue or partition) and name, the default rate
// limit of the partitions with an empty name, its recent starts those of
// every partition under it and its max that of each; and, for a
// partition's rate limit alone, leasework_rate_limit_held_back, its rows
// set aside, as leasework_limit_held_back for its concurrency limit; a
// kind's or a queue's rate limit has none, its rows held back staying
// READY), and fair scheduling's
// ([lease.Store.Weights] and [lease.Store.Agings]:
// leasework_fair_partitions_active, the partitions a fair queue's claims
// serve now, labelled by queue; leasework_fair_weight, labelled by queue
// and partition, "" for the queue's default; and
// leasework_priority_aging_seconds, labelled by queue) in the Prometheus
// text exposition format, for a Prometheus (or OpenTelemetry collector)
// scrape. It needs no client library. The stats, the limits, the rate
// limits and the weights and agings are five queries, read within
// statsTimeout (zero: 5s) together; when one cannot be read, the counters
// are still served, and leasework_stats_up, leasework_limits_up,
// leasework_rate_limits_up or leasework_fair_up is 0 (the limits', the
// rate limits' and fair scheduling's also on a schema that predates them:
// see lease.Migrations).
func (w *Worker) MetricsHandler(statsTimeout time.Duration) http.Handler {
	if statsTimeout <= 0 {
		statsTimeout = 5 * time.Second
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), statsTimeout)
		defer cancel()
		st, err := w.Stats(ctx)
		limits, lerr := w.store.Limits(ctx)
		rates, rerr := w.store.RateLimits(ctx)
		weights, werr := w.store.Weights(ctx)
		var agings map[string]time.Duration
		if werr == nil {
			agings, werr = w.store.Agings(ctx)
		}
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		var b strings.Builder
		w.writeMetrics(&b, st, err == nil)
		w.writeLimits(&b, limits, lerr == nil)
		w.writeRateLimits(&b, rates, rerr == nil)
		w.writeFair(&b, weights, agings, werr == nil)
		_, _ = rw.Write([]byte(b.String()))
	})
}

func (w *Worker) writeMetrics(b *strings.Builder, st lease.Stats, statsUp bool) {
	tableName := labelValue(w.store.Schema() + "." + w.store.Table())
	worker := `{worker="` + labelValue(w.cfg.WorkerID) + `"}`
	table := `{table="` + tableName + `"}`
	metric := func(name, typ, help, labels string, v any) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n%s%s %v\n", name, help, name, typ, name, labels, v)
	}
	c := w.Counters()
	for _, m := range []struct {
		name, help string
		v          int64
	}{
		{"claim_queries", "Claim statements sent.", c.ClaimQueries},
		{"claim_errors", "Claim statements that failed.", c.ClaimErrors},
		{"claims_held_back", "Claim statements that took rows and that a concurrency or rate limit kept from more.", c.ClaimsHeldBack},
		{"claimed", "Claims taken.", c.Claimed},
		{"reclaimed", "Claims of rows whose previous owner's lease had expired.", c.Reclaimed},
		{"outcomes_replayed", "Outcome writes found already recorded by an earlier try.", c.OutcomesReplayed},
		{"leases_lost", "Handlers cancelled because their lease was lost.", c.LeasesLost},
		{"local_lease_timeouts", "Leases given up because no renewal was confirmed in time.", c.LocalLeaseTimeouts},
		{"cancelled", "Handlers cancelled because their event was cancelled from outside.", c.Cancelled},
		{"panics", "Handler panics.", c.Panics},
		{"outcome_write_errors", "Outcome statements that failed; their outcomes were tried again, or abandoned.", c.OutcomeWriteErrors},
		{"reruns_from_abandoned_outcomes", "Completions and failures abandoned: handlers that ran to their end whose events run again.", c.RerunsFromAbandonedOutcomes},
		{"hung_handlers", "Handlers that ignored their ended context; their claims were left to expire.", c.HungHandlers},
		{"retention_deleted", "Finished rows deleted by retention.", c.RetentionDeleted},
	} {
		metric("leasework_"+m.name+"_total", "counter", m.help, worker, m.v)
	}
	for _, o := range Outcomes() {
		info := outcomeInfo[o]
		metric("leasework_"+info.counter+"_total", "counter", info.help, worker, w.count.outcomes[o].Load())
	}
	w.byKind.write(b, labelValue(w.cfg.WorkerID))
	up := 0
	if statsUp {
		up = 1
	}
	metric("leasework_stats_up", "gauge", "Whether the table's figures could be read.", table, up)
	if !statsUp {
		return
	}
	fmt.Fprintf(b, "# HELP leasework_events Rows per status.\n# TYPE leasework_events gauge\n")
	for _, s := range leasework.Statuses() {
		fmt.Fprintf(b, "leasework_events{table=\"%s\",status=\"%s\"} %d\n", tableName, s, st.Rows[s])
	}
	metric("leasework_eligible_events", "gauge", "READY rows that are due.", table, st.Eligible)
	metric("leasework_expired_claims", "gauge", "INPROGRESS rows whose lease has expired.", table, st.ExpiredClaims)
	metric("leasework_oldest_eligible_age_seconds", "gauge", "How long the oldest claimable event has waited.", table, st.OldestEligibleAge.Seconds())
}

// writeLimits writes each concurrency limit's gauges, and whether the
// limits could be read (limitsUp).
func (w *Worker) writeLimits(b *strings.Builder, limits []lease.LimitInfo, limitsUp bool) {
	tableName := labelValue(w.store.Schema() + "." + w.store.Table())
	up := 0
	if limitsUp {
		up = 1
	}
	fmt.Fprintf(b, "# HELP leasework_limits_up Whether the concurrency limits could be read.\n# TYPE leasework_limits_up gauge\nleasework_limits_up{table=\"%s\"} %d\n", tableName, up)
	if !limitsUp {
		return
	}
	for _, m := range []struct {
		name, help string
		v          func(lease.LimitInfo) int64
	}{
		{"live", "Attempts counted under the concurrency limit now.", func(l lease.LimitInfo) int64 { return int64(l.Live) }},
		{"max", "The most live attempts the concurrency limit allows.", func(l lease.LimitInfo) int64 { return int64(l.Max) }},
		{"held_back", "Rows the full concurrency limit holds back now: due READY rows of its kind or queue; for a partition's limit, its rows set aside.", func(l lease.LimitInfo) int64 { return l.HeldBack }},
	} {
		fmt.Fprintf(b, "# HELP leasework_limit_%s %s\n# TYPE leasework_limit_%s gauge\n", m.name, m.help, m.name)
		for _, l := range limits {
			fmt.Fprintf(b, "leasework_limit_%s{table=\"%s\",scope=\"%s\",name=\"%s\"} %d\n", m.name, tableName, l.Scope, labelValue(l.Name), m.v(l))
		}
	}
}

// writeRateLimits writes each rate limit's gauges, and whether the rate
// limits could be read (up).
func (w *Worker) writeRateLimits(b *strings.Builder, rates []lease.RateLimitInfo, up bool) {
	tableName := labelValue(w.store.Schema() + "." + w.store.Table())
	n := 0
	if up {
		n = 1
	}
	fmt.Fprintf(b, "# HELP leasework_rate_limits_up Whether the rate limits could be read.\n# TYPE leasework_rate_limits_up gauge\nleasework_rate_limits_up{table=\"%s\"} %d\n", tableName, n)
	if !up {
		return
	}
	for _, m := range []struct {
		name, help string
		v          func(lease.RateLimitInfo) int64
		partsOnly  bool
	}{
		{"recent", "Attempt starts the rate limit counts in the window that ends now; for the default of the partitions, those of every partition under it.", func(l lease.RateLimitInfo) int64 { return int64(l.Recent) }, false},
		{"max", "The most attempt starts the rate limit allows in any window of its period; for the default of the partitions, of each partition.", func(l lease.RateLimitInfo) int64 { return int64(l.Max) }, false},
		{"held_back", "Rows of the partition set aside now (WAITING without a key), by its rate or its concurrency limit; for the default of the partitions, those of every partition under it. Partition rate limits only: a kind's or a queue's rows held back stay READY.", func(l lease.RateLimitInfo) int64 { return l.HeldBack }, true},
	} {
		fmt.Fprintf(b, "# HELP leasework_rate_limit_%s %s\n# TYPE leasework_rate_limit_%s gauge\n", m.name, m.help, m.name)
		for _, l := range rates {
			if m.partsOnly && l.Scope != lease.ScopePartition {
				continue
			}
			fmt.Fprintf(b, "leasework_rate_limit_%s{table=\"%s\",scope=\"%s\",name=\"%s\"} %d\n", m.name, tableName, l.Scope, labelValue(l.Name), m.v(l))
		}
	}
}

// writeFair writes fair scheduling's gauges: each fair queue's partitions
// served now, each weight, each queue's priority aging; and whether they
// could be read (up).
func (w *Worker) writeFair(b *strings.Builder, weights []lease.WeightInfo, agings map[string]time.Duration, up bool) {
	tableName := labelValue(w.store.Schema() + "." + w.store.Table())
	n := 0
	if up {
		n = 1
	}
	fmt.Fprintf(b, "# HELP leasework_fair_up Whether the fair queues' weights and the priority agings could be read.\n# TYPE leasework_fair_up gauge\nleasework_fair_up{table=\"%s\"} %d\n", tableName, n)
	if !up {
		return
	}
	fmt.Fprintf(b, "# HELP leasework_fair_partitions_active Partitions of the fair queue that its claims serve now (those with due events that claims have seen).\n# TYPE leasework_fair_partitions_active gauge\n")
	for _, wi := range weights {
		if wi.Partition == "" {
			fmt.Fprintf(b, "leasework_fair_partitions_active{table=\"%s\",queue=\"%s\"} %d\n", tableName, labelValue(wi.Queue), wi.Active)
		}
	}
	fmt.Fprintf(b, "# HELP leasework_fair_weight The weight of a partition in a fair queue; partition \"\" is the queue's default, which makes it fair.\n# TYPE leasework_fair_weight gauge\n")
	for _, wi := range weights {
		fmt.Fprintf(b, "leasework_fair_weight{table=\"%s\",queue=\"%s\",partition=\"%s\"} %d\n", tableName, labelValue(wi.Queue), labelValue(wi.Partition), wi.Weight.Weight)
	}
	fmt.Fprintf(b, "# HELP leasework_priority_aging_seconds How long a due event of the queue waits before it is claimed as one priority level higher.\n# TYPE leasework_priority_aging_seconds gauge\n")
	for _, q := range slices.Sorted(maps.Keys(agings)) {
		fmt.Fprintf(b, "leasework_priority_aging_seconds{table=\"%s\",queue=\"%s\"} %v\n", tableName, labelValue(q), agings[q].Seconds())
	}
}

// labelValue escapes a Prometheus label value.
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
