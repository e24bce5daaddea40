package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/lease"
)

// statuses in the order the pages show them: the way an event goes.
var statuses = leasework.Statuses()

// view asks Options.Authorize whether the request may see page (about
// event id, for the event page), and writes the refusal if not.
func (c *Console) view(w http.ResponseWriter, r *http.Request, pageName string, id int64) bool {
	if err := c.authorize(r, Action{Name: ActionView, Page: pageName, ID: id}); err != nil {
		c.refuse(w, r, err)
		return false
	}
	return true
}

// refuse writes the page of a request Options.Authorize refused.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, err error) {
	c.log.Warn("leasework console: refused by Authorize", "method", r.Method, "path", r.URL.Path, "err", err)
	c.fail(w, r, http.StatusForbidden, "Not allowed: "+err.Error())
}

type statusCount struct {
	Status leasework.Status
	Rows   int64
}

// countRow is one queue and kind of the overview's table: its rows per
// status, in the order of statuses.
type countRow struct {
	Queue, Kind string
	Cells       []statusCount
}

type overviewData struct {
	Stats    lease.Stats
	Statuses []statusCount
	Rows     []countRow
	Paused   []lease.QueueInfo
	Held     []lease.HeldKey
	Chart    chart
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	if !c.view(w, r, PageOverview, 0) {
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	st, err := c.store.Stats(ctx)
	if err != nil {
		c.dbFail(w, r, "read the table's figures", err)
		return
	}
	queues, err := c.store.Queues(ctx)
	if err != nil {
		c.dbFail(w, r, "read the queues", err)
		return
	}
	counts, err := c.store.Counts(ctx)
	if err != nil {
		c.dbFail(w, r, "count the events", err)
		return
	}
	minutes, err := c.store.Throughput(ctx, chartMinutes)
	if err != nil {
		c.dbFail(w, r, "read the last hour's throughput", err)
		return
	}
	held, err := c.store.HeldKeys(ctx, lease.HeldKeysRequest{Limit: 5})
	if err != nil {
		c.dbFail(w, r, "read the held keys", err)
		return
	}
	d := overviewData{Stats: st, Held: held, Chart: newChart(minutes)}
	for _, s := range statuses {
		d.Statuses = append(d.Statuses, statusCount{s, st.Rows[s]})
	}
	for _, q := range queues {
		if !q.Paused.IsZero() {
			d.Paused = append(d.Paused, q)
		}
	}
	for _, n := range counts {
		if k := len(d.Rows) - 1; k < 0 || d.Rows[k].Queue != n.Queue || d.Rows[k].Kind != n.Kind {
			row := countRow{Queue: n.Queue, Kind: n.Kind}
			for _, s := range statuses {
				row.Cells = append(row.Cells, statusCount{Status: s})
			}
			d.Rows = append(d.Rows, row)
		}
		row := &d.Rows[len(d.Rows)-1]
		for i := range row.Cells {
			if row.Cells[i].Status == n.Status {
				row.Cells[i].Rows = n.Rows
			}
		}
	}
	c.render(w, r, PageOverview, "Overview", d)
}

type eventsData struct {
	Status                 leasework.Status
	Kind, Queue, Partition string
	After                  int64
	Statuses               []leasework.Status
	Rows                   []lease.Row
	Next                   int64 // the after of the next page; zero when this is the last
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	if !c.view(w, r, PageEvents, 0) {
		return
	}
	q := r.URL.Query()
	d := eventsData{Status: leasework.Status(q.Get("status")), Kind: q.Get("kind"), Queue: q.Get("queue"), Partition: q.Get("partition"),
		Statuses: statuses}
	if d.Status != "" && !d.Status.Valid() {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown status %q: choose READY, WAITING, INPROGRESS, DONE, FAILED or DISCARDED.", d.Status))
		return
	}
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not a place in the list: after takes an event id (a whole number, 0 or more).", a))
			return
		}
		d.After = n
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	rows, err := c.store.List(ctx, lease.ListRequest{Status: d.Status, Kind: d.Kind, Queue: d.Queue, Partition: d.Partition,
		AfterID: d.After, Limit: c.opts.PageSize + 1})
	if err != nil {
		c.dbFail(w, r, "list the events", err)
		return
	}
	if len(rows) > c.opts.PageSize {
		rows = rows[:c.opts.PageSize]
		d.Next = rows[len(rows)-1].ID
	}
	d.Rows = rows
	c.render(w, r, PageEvents, "Events", d)
}

type eventData struct {
	Row               lease.Row
	Metadata          []metadataPair // sorted by key
	Payload, Progress preview
	// Steps are the first StepsShown of the event's steps, in the order
	// recorded; StepsCount is how many it has. Output is the preview of
	// its output, nil when none was recorded.
	Steps            []stepView
	StepsCount       int
	Output           *preview
	Requeue, Discard bool // whether to show the forms
	Cancel           bool
	// Why is what keeps a READY, WAITING or INPROGRESS row from running
	// (lease.Store.WhyNotRunning); WhyShown whether to say it, WhyFailed
	// whether it could not be read.
	Why                 []lease.Reason
	WhyShown, WhyFailed bool
}

type metadataPair struct{ Key, Value string }

// stepView is one recorded step, as an event page shows it.
type stepView struct {
	N          int // 1 for the first recorded
	Name       string
	Generation int64
	At         time.Time
	Value      preview
}

// stepViews previews the first StepsShown of steps.
func stepViews(steps []lease.StepRecord) []stepView {
	out := make([]stepView, 0, min(len(steps), StepsShown))
	for i, st := range steps[:min(len(steps), StepsShown)] {
		out = append(out, stepView{N: i + 1, Name: st.Name, Generation: st.Generation, At: st.At,
			Value: newPreview(st.Value, StepPreviewBytes)})
	}
	return out
}

// metadataPairs returns m's pairs sorted by key, each value cut to the
// preview's cap.
func metadataPairs(m map[string]string) []metadataPair {
	pairs := make([]metadataPair, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, metadataPair{k, lease.CleanText(m[k], PreviewBytes)})
	}
	return pairs
}

// pathID reads the {id} of the request's path: a row id. It writes the
// 400 page and returns false when it is not one.
func (c *Console) pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not an event id: ids are whole numbers from 1.", s))
		return 0, false
	}
	return id, true
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok || !c.view(w, r, PageEvent, id) {
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	row, err := c.store.Get(ctx, id)
	if errors.Is(err, lease.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No event has id %d. It may never have existed, or retention deleted it after it was DONE.", id))
		return
	}
	if err != nil {
		c.dbFail(w, r, "read the event", err)
		return
	}
	d := eventData{Row: row, Metadata: metadataPairs(row.Metadata),
		Payload: newPreview(row.Payload, PreviewBytes), Progress: newPreview(row.Progress, PreviewBytes),
		Steps: stepViews(row.Steps), StepsCount: len(row.Steps)}
	if row.Output != nil {
		out := newPreview(row.Output, PreviewBytes)
		d.Output = &out
	}
	switch row.Status {
	case leasework.StatusFailed:
		d.Requeue = c.may(r, Action{Name: ActionRequeue, ID: id, Generation: row.Generation})
		d.Discard = c.may(r, Action{Name: ActionDiscard, ID: id, Generation: row.Generation})
		d.Cancel = c.may(r, Action{Name: ActionCancel, ID: id})
	case leasework.StatusReady, leasework.StatusWaiting, leasework.StatusInProgress:
		d.Cancel = c.may(r, Action{Name: ActionCancel, ID: id})
		d.WhyShown = true
		d.Why, err = c.store.WhyNotRunning(ctx, id)
		if err != nil {
			// The row is shown without it (a schema before the limits
			// cannot say it).
			c.log.Error("leasework console: database", "what", "read why the event is not running", "path", r.URL.Path, "err", err)
			d.WhyFailed = true
		}
	}
	c.render(w, r, PageEvent, fmt.Sprintf("Event %d", id), d)
}

type queueRow struct {
	lease.QueueInfo
	Limit         *lease.LimitInfo     // the queue's concurrency limit; nil for none
	Rate          *lease.RateLimitInfo // the queue's rate limit; nil for none
	Fair          *fairQueue           // the queue's fairness; nil when it is not fair
	Aging         time.Duration        // the queue's priority aging; zero for none
	Pause, Resume bool                 // whether to show the forms
}

type queuesData struct {
	Queues   []queueRow
	PauseAny bool // whether to show the form that pauses a queue by name
	Limits   []limitRow
	SetAny   bool // whether to show the form that sets a limit by name
	// SetDefault: whether to show the form that sets the default limit
	// of the partitions.
	SetDefault bool
	Changes    []lease.LimitChange // the latest, latest first
	MaxLimit   int                 // the most a limit allows, for the forms
	// NoLimits: the schema predates the limits (it lacks migration 17).
	NoLimits bool
	// RateLimits are the rate limits; SetRate whether to show the form
	// that sets one by name, SetRateDefault the one that sets the default
	// rate limit of the partitions; NoRateLimits: the schema predates them
	// (it lacks migration 21, or 24 for those of the partitions).
	RateLimits     []rateLimitRow
	SetRate        bool
	SetRateDefault bool
	NoRateLimits   bool
	MaxRateStarts  int // the most starts a rate limit allows, for the forms
	// Weights are the fair queues' weights, each queue's default first,
	// and Agings the queues' priority agings; SetWeight and SetAging
	// whether to show the forms that set one by name; NoFair: the schema
	// predates them (it lacks migration 22).
	Weights    []weightRow
	Agings     []agingRow
	SetWeight  bool
	SetAging   bool
	NoFair     bool
	MaxWeight  int    // the largest weight, for the forms
	AgingRange string // the waits an aging may have, for the forms
}

type rateLimitRow struct {
	lease.RateLimitInfo
	Set, Clear bool // whether to show the forms
	// Partition: a partition's rate limit, whose HeldBack counts its
	// events set aside; Default: the default rate limit of the partitions
	// (its Name is empty).
	Partition, Default bool
}

// sqlStateUndefinedTable is the SQLSTATE of a table that does not exist.
const sqlStateUndefinedTable = "42P01"

type limitRow struct {
	lease.LimitInfo
	Set, Clear bool // whether to show the forms
	// Default: the default limit of the partitions (its Name is empty).
	Default bool
}

// limitChanges is how many of the latest changes of the limits the queues
// page shows.
const limitChanges = 10

func (c *Console) queues(w http.ResponseWriter, r *http.Request) {
	if !c.view(w, r, PageQueues, 0) {
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	qs, err := c.store.Queues(ctx)
	if err != nil {
		c.dbFail(w, r, "read the queues", err)
		return
	}
	// The forms that pause a queue and set a limit by name: asked as a
	// pause of no queue, a limit of nothing, in particular.
	d := queuesData{PauseAny: c.may(r, Action{Name: ActionPause}), MaxLimit: lease.MaxLimit, MaxRateStarts: lease.MaxRateStarts,
		MaxWeight: lease.MaxWeight, AgingRange: fmt.Sprintf("from %v to %v", lease.MinAgeAfter, lease.MaxAgeAfter)}
	limits, err := c.store.Limits(ctx)
	switch {
	case err != nil && c.store.Driver().SQLState(err) == sqlStateUndefinedTable:
		// The events table was read just now: its limits' table is what
		// is missing. The queues are shown without them.
		d.NoLimits = true
	case err != nil:
		c.dbFail(w, r, "read the concurrency limits", err)
		return
	default:
		d.Changes, err = c.store.LimitChanges(ctx, limitChanges)
		if err != nil {
			c.dbFail(w, r, "read the changes of the concurrency limits", err)
			return
		}
		d.SetAny = c.may(r, Action{Name: ActionSetLimit})
		d.SetDefault = c.may(r, Action{Name: ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition}})
	}
	rates, err := c.store.RateLimits(ctx)
	switch {
	case err != nil && c.store.Driver().SQLState(err) == sqlStateUndefinedTable:
		d.NoRateLimits = true
	case err != nil:
		c.dbFail(w, r, "read the rate limits", err)
		return
	default:
		d.SetRate = c.may(r, Action{Name: ActionSetLimit, Rate: true})
		d.SetRateDefault = c.may(r, Action{Name: ActionSetLimit, Limit: lease.Limit{Scope: lease.ScopePartition}, Rate: true})
	}
	queueRates := map[string]*lease.RateLimitInfo{}
	for i, l := range rates {
		if l.Scope == lease.ScopeQueue {
			queueRates[l.Name] = &rates[i]
		}
		named := lease.Limit{Scope: l.Scope, Name: l.Name}
		d.RateLimits = append(d.RateLimits, rateLimitRow{
			RateLimitInfo: l,
			Set:           c.may(r, Action{Name: ActionSetLimit, Limit: named, Rate: true}),
			Clear:         c.may(r, Action{Name: ActionClearLimit, Limit: named, Rate: true}),
			Partition:     l.Scope == lease.ScopePartition,
			Default:       l.Scope == lease.ScopePartition && l.Name == "",
		})
	}
	fairQueues, agings, ok := c.fairData(ctx, w, r, &d)
	if !ok {
		return
	}
	queueLimits := map[string]*lease.LimitInfo{}
	for i, l := range limits {
		if l.Scope == lease.ScopeQueue {
			queueLimits[l.Name] = &limits[i]
		}
		named := lease.Limit{Scope: l.Scope, Name: l.Name}
		d.Limits = append(d.Limits, limitRow{
			LimitInfo: l,
			Set:       c.may(r, Action{Name: ActionSetLimit, Limit: named}),
			Clear:     c.may(r, Action{Name: ActionClearLimit, Limit: named}),
			Default:   l.Scope == lease.ScopePartition && l.Name == "",
		})
	}
	for _, q := range qs {
		row := queueRow{QueueInfo: q, Limit: queueLimits[q.Name], Rate: queueRates[q.Name], Fair: fairQueues[q.Name], Aging: agings[q.Name]}
		if q.Paused.IsZero() {
			row.Pause = c.may(r, Action{Name: ActionPause, Queue: q.Name})
		} else {
			row.Resume = c.may(r, Action{Name: ActionResume, Queue: q.Name})
		}
		d.Queues = append(d.Queues, row)
	}
	c.render(w, r, PageQueues, "Queues", d)
}

type keysData struct {
	After string
	Keys  []keyRow
	Next  string // the after of the next page; empty when this is the last
	More  bool
}

type keyRow struct {
	lease.HeldKey
	Requeue, Discard bool // whether to show the forms
}

func (c *Console) keys(w http.ResponseWriter, r *http.Request) {
	if !c.view(w, r, PageKeys, 0) {
		return
	}
	d := keysData{After: r.URL.Query().Get("after")}
	ctx, cancel := c.ctx(r)
	defer cancel()
	held, err := c.store.HeldKeys(ctx, lease.HeldKeysRequest{AfterKey: d.After, Limit: c.opts.PageSize + 1})
	if err != nil {
		c.dbFail(w, r, "read the held keys", err)
		return
	}
	if len(held) > c.opts.PageSize {
		held = held[:c.opts.PageSize]
		d.Next, d.More = held[len(held)-1].Key, true
	}
	for _, h := range held {
		d.Keys = append(d.Keys, keyRow{
			HeldKey: h,
			Requeue: c.may(r, Action{Name: ActionRequeue, ID: h.HeadID, Generation: h.Generation}),
			Discard: c.may(r, Action{Name: ActionDiscard, ID: h.HeadID, Generation: h.Generation}),
		})
	}
	c.render(w, r, PageKeys, "Held keys", d)
}
