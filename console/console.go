package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/leasework/leasework/lease"
)

// ActionName names what a request does, for [Options.Authorize].
type ActionName string

// The actions. Every one but ActionView changes the table, and is taken
// only by a POST of one of the console's forms, with [Options.Actions] set.
const (
	ActionView    ActionName = "view"    // show a page (Action.Page)
	ActionRequeue ActionName = "requeue" // a FAILED event back to READY (Store.Requeue)
	ActionDiscard ActionName = "discard" // give up on a FAILED event (Store.Discard)
	ActionCancel  ActionName = "cancel"  // end an unfinished event, once a running attempt stops (Store.Cancel)
	ActionPause   ActionName = "pause"   // pause a queue (Store.PauseQueue)
	ActionResume  ActionName = "resume"  // resume a queue (Store.ResumeQueue)
	// ActionSetLimit sets a concurrency limit, new or changed
	// (Store.SetLimit); ActionClearLimit removes one (Store.ClearLimit).
	// They set and clear rate limits too (Store.SetRateLimit,
	// Store.ClearRateLimit), with Action.Rate set; a fair queue's
	// weights (Store.SetWeight, Store.ClearWeight), with Action.Weight
	// set; and a queue's priority aging (Store.SetAging,
	// Store.ClearAging), with Action.Aging set.
	ActionSetLimit   ActionName = "set-limit"
	ActionClearLimit ActionName = "clear-limit"
)

// The pages, as Action.Page names them for ActionView.
const (
	PageOverview = "overview" // counts, ages, held keys, the last hour's chart
	PageEvents   = "events"   // the events list, filtered and paged
	PageEvent    = "event"    // one event (Action.ID)
	PageQueues   = "queues"   // the queues, paused or running, the limits, the weights and agings
	PageKeys     = "keys"     // the keys held by a FAILED event
)

// Action is what a request asks to do, as [Options.Authorize] sees it.
type Action struct {
	Name ActionName
	// Page is the page shown, for ActionView; empty otherwise.
	Page string
	// ID is the event's row id: of the event page viewed, or of the event
	// requeued, discarded or cancelled. Zero otherwise.
	ID int64
	// Generation is, for ActionDiscard and ActionRequeue, the generation
	// the operator saw the event FAILED at (a discard or requeue of any
	// other is refused). Zero otherwise.
	Generation int64
	// Queue is the queue paused or resumed. Empty otherwise.
	Queue string
	// Limit is the limit set, for ActionSetLimit, or cleared, for
	// ActionClearLimit (its Scope and Name; Max is zero). Zero otherwise.
	// The default limit of the partitions has Scope
	// [lease.ScopePartition] and an empty Name. Asked whether to show a
	// form, it has no Max (the form's is not known yet), and for the form
	// that sets a limit by name, no Scope or Name either.
	Limit lease.Limit
	// Rate says that Limit is a rate limit ([lease.RateLimit]) of its
	// Scope (kind, queue or partition) and Name, for ActionSetLimit and
	// ActionClearLimit: Limit.Max is then the most starts in any window
	// of Per (for ActionSetLimit; zero when asked whether to show a
	// form). The default rate limit of the partitions has Scope
	// [lease.ScopePartition] and an empty Name, as the default limit of
	// the partitions; asked whether to show the form that sets it, Limit
	// has that Scope alone, and for the form that sets a rate limit by
	// name, no Scope either. A hook that decides ActionSetLimit and
	// ActionClearLimit without looking at Rate decides the rate limits'
	// changes the same way, Max included, and a partition's as the
	// partition's concurrency limit.
	Rate bool
	Per  time.Duration
	// Weight says that the change is of a fair queue's weight
	// ([lease.Weight]), for ActionSetLimit and ActionClearLimit: Limit
	// has Scope [lease.ScopeQueue] and Name the queue, and Max the weight
	// (for ActionSetLimit; zero when asked whether to show a form);
	// Partition is the partition weighed, empty for the queue's default
	// (setting it makes the queue fair, clearing it ends that). Asked
	// whether to show the forms that set a weight by name, Limit is zero.
	//
	// A weight and an aging are decided as changes of their queue's
	// limits, not as actions of their own, so that a hook written for
	// the limits decides them without a change: one that lets only some
	// people change limits, or only some queues' limits, keeps to it for
	// the queue's weights and aging, where a new action name would pass
	// a hook written as a deny list.
	Weight    bool
	Partition string
	// Aging says that the change is of a queue's priority aging
	// ([lease.Store.SetAging]), for ActionSetLimit and ActionClearLimit:
	// Limit has Scope [lease.ScopeQueue] and Name the queue (Max zero),
	// and Per is the wait (for ActionSetLimit; zero when asked whether to
	// show a form). Asked whether to show the form that sets an aging by
	// name, Limit is zero.
	Aging bool
}

// Options configures a [Console]. The zero value is a read-only console
// that shows every page to whoever reaches it.
type Options struct {
	// Actions enables the forms that change the table: requeue, discard,
	// cancel, pause and resume, set and clear a concurrency limit or a
	// rate limit, and a fair queue's weights or a queue's priority aging.
	// False, the default, is read-only: no form is shown and every POST is
	// refused with 403 Forbidden.
	Actions bool

	// Authorize, when set, decides every request: it is called with the
	// request and what it asks for, for every page view (ActionView, with
	// Action.Page) and for every action, before the action runs; a non-nil
	// error refuses it with 403 Forbidden, and the error's text is shown.
	// It is also asked, with the same Action, whether to show each form,
	// so a person sees only the buttons they may press. The stylesheet is
	// served without asking. Nil allows every page, and every action that
	// Actions enables: then whoever can reach the handler can act, and the
	// application's own router and middleware must decide who reaches it.
	Authorize func(r *http.Request, a Action) error

	// Logger receives one line per action taken or refused, and the
	// database errors behind a failed page. Nil discards them.
	Logger *slog.Logger

	// Operator, when set, names the person behind a request that takes
	// an action: the audit of the limits records it as who
	// set or cleared a limit, a weight or an aging
	// ([lease.Store.LimitChanges]), and each
	// action's log line carries it. Nil names them "console" and the
	// request's remote address (behind a proxy, the proxy's). A name is
	// cut to [MaxOperatorBytes].
	Operator func(r *http.Request) string

	// Secret keys the forms' anti-forgery token and the signature of the
	// message shown after an action. Nil means 32 random bytes drawn by
	// [New]: enough for one process. Consoles behind one load balancer must
	// share a secret (at least 16 bytes), or a form served by one is
	// refused by the other. The token is one value per secret, the same
	// for every person: it is a second layer behind the cross-origin check,
	// for browsers that send neither Sec-Fetch-Site nor Origin, not a
	// per-session secret. Change the secret to retire a token seen.
	Secret []byte

	// TrustedOrigins are origins ("https://ops.example.com") whose
	// cross-origin POSTs are allowed, for a console reached through a proxy
	// on another host; see [http.CrossOriginProtection.AddTrustedOrigin].
	// Nil trusts none: a POST from another origin is refused.
	TrustedOrigins []string

	// AllowedHosts are the names the console answers to, written as a
	// browser sends them in the Host header: "ops.example.com" (at any
	// port), "ops.example.com:8443" (at that port only; a Host without a
	// port names port 80, or 443 over TLS), "10.0.0.7", "[::1]:8080".
	// Names are compared without case and without a trailing dot. A
	// request with any other Host is refused with 403 Forbidden before
	// anything is read or rendered. This stops DNS rebinding: a page of
	// another site that reaches the console under the site's own name, as
	// its own origin, so that neither the cross-origin check nor the form
	// token would stop it.
	//
	// Nil (or empty) answers only to names no DNS answer decides:
	// "localhost" and IP address literals, at any port. A console reached
	// by a DNS name (a service's own, behind its router or a proxy) must
	// list it. A proxy in front must pass the browser's Host on (or check
	// it itself): the console sees only the Host the proxy sends.
	AllowedHosts []string

	// PageSize is how many events or keys a list page shows. Zero means
	// 50; at most 1000.
	PageSize int

	// Timeout bounds the database statements of one request. Zero means
	// none beyond the request's own context.
	Timeout time.Duration
}

// Defaults and limits of [Options].
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// PreviewBytes is how much of a payload, progress or output an event page
// shows.
const PreviewBytes = 4 << 10

// StepPreviewBytes is how much of each step's recorded value an event page
// shows, and StepsShown how many of its steps (the first recorded): an
// event's steps may add up to a megabyte (framework.MaxStepsSize).
const (
	StepPreviewBytes = 512
	StepsShown       = 200
)

// MaxOperatorBytes bounds the name [Options.Operator] gives.
const MaxOperatorBytes = 255

// Console is the operator console of one events table: an [http.Handler]
// serving its pages, and its actions when enabled. It is safe for
// concurrent use.
type Console struct {
	store *lease.Store
	opts  Options
	log   *slog.Logger
	key   []byte
	token string // the forms' anti-forgery token
	cop   *http.CrossOriginProtection
	hosts []hostName // Options.AllowedHosts; nil for the default
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns the console of store's table, configured by opts. It checks
// opts and parses its templates; it does not touch the database.
func New(store *lease.Store, opts Options) (*Console, error) {
	if store == nil {
		return nil, errors.New("console: New: store is nil")
	}
	switch {
	case opts.PageSize < 0 || opts.PageSize > MaxPageSize:
		return nil, fmt.Errorf("console: Options.PageSize is %d; it must be from 1 to %d, or zero for %d", opts.PageSize, MaxPageSize, DefaultPageSize)
	case opts.PageSize == 0:
		opts.PageSize = DefaultPageSize
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("console: Options.Timeout is %v; it must not be negative", opts.Timeout)
	}
	c := &Console{store: store, opts: opts, log: opts.Logger, cop: http.NewCrossOriginProtection()}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case opts.Secret == nil:
		c.key = make([]byte, 32)
		rand.Read(c.key)
	case len(opts.Secret) < 16:
		return nil, fmt.Errorf("console: Options.Secret is %d bytes long; it must be at least 16, or nil for a random one", len(opts.Secret))
	default:
		c.key = append([]byte(nil), opts.Secret...)
	}
	c.token = c.sign("csrf")
	for _, o := range opts.TrustedOrigins {
		if err := c.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("console: Options.TrustedOrigins: %w", err)
		}
	}
	hosts, err := parseAllowedHosts(opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	c.hosts = hosts
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c.pages = pages
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.overview)
	m.HandleFunc("GET /events", c.events)
	m.HandleFunc("GET /events/{id}", c.event)
	m.HandleFunc("GET /queues", c.queues)
	m.HandleFunc("GET /keys", c.keys)
	m.HandleFunc("GET /static/console.css", serveCSS)
	m.HandleFunc("POST /events/{id}/{action}", c.eventAction)
	m.HandleFunc("POST /queues/{action}", c.queueAction)
	m.HandleFunc("POST /limits/{action}", c.limitAction)
	m.HandleFunc("POST /rate-limits/{action}", c.rateLimitAction)
	m.HandleFunc("POST /weights/{action}", c.weightAction)
	m.HandleFunc("POST /aging/{action}", c.agingAction)
	// An action's address asked for with another method changes nothing.
	m.HandleFunc("/events/{id}/{action}", c.notPost)
	m.HandleFunc("/queues/{action}", c.notPost)
	m.HandleFunc("/limits/{action}", c.notPost)
	m.HandleFunc("/rate-limits/{action}", c.notPost)
	m.HandleFunc("/weights/{action}", c.notPost)
	m.HandleFunc("/aging/{action}", c.notPost)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no page at this address.")
	})
	c.mux = m
}

// ServeHTTP serves the console's pages at "/", "/events", "/events/{id}",
// "/queues" and "/keys" of the request's path, to requests whose Host is
// one of [Options.AllowedHosts]. Mount it under a prefix
// with [http.StripPrefix]; its links are relative, so they work under any
// prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/") {
		// http.StripPrefix("/ops/", c) leaves "events" of "/ops/events".
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = "/"+r.URL.Path, ""
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if !c.hostAllowed(r) {
		c.refuseHost(w, r)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// base is the relative path from the request's page to the console's
// root: "./" for "/" and "/events", "../" for "/events/7".
func base(r *http.Request) string {
	depth := strings.Count(r.URL.Path, "/") - 1
	if depth <= 0 {
		return "./"
	}
	return strings.Repeat("../", depth)
}

// authorize asks Options.Authorize about a; nil when it is not set.
func (c *Console) authorize(r *http.Request, a Action) error {
	if c.opts.Authorize == nil {
		return nil
	}
	return c.opts.Authorize(r, a)
}

// operator names the person behind r, for the limits' audit and the
// action log: Options.Operator's name, or "console" and r's remote address.
func (c *Console) operator(r *http.Request) string {
	if c.opts.Operator != nil {
		return lease.CleanText(c.opts.Operator(r), MaxOperatorBytes)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return lease.CleanText("console "+host, MaxOperatorBytes)
}

// may reports whether the page should show the form for a.
func (c *Console) may(r *http.Request, a Action) bool {
	return c.opts.Actions && c.authorize(r, a) == nil
}
