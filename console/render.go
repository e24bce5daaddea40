package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"
	"unicode/utf8"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var stylesheet []byte

// serveCSS serves the stylesheet. Its address is the same for every
// version, so browsers are told to check it again after an hour.
func serveCSS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(stylesheet)
}

var funcs = template.FuncMap{
	"ts":    formatTime,
	"tsp":   formatTimePtr,
	"age":   formatAge,
	"short": short,
}

// parsePages parses each page's template with the layout.
func parsePages() (map[string]*template.Template, error) {
	names := []string{PageOverview, PageEvents, PageEvent, PageQueues, PageKeys, "error"}
	out := make(map[string]*template.Template, len(names))
	for _, n := range names {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse the %s page: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// page is what the layout shows around every page's content.
type page struct {
	Base    string // the relative path to the console's root, ending in "/"
	Title   string
	Nav     string // the page of the navigation bar to mark current
	Table   string // the events table, schema-qualified
	Actions bool   // whether actions are enabled
	Token   string // the forms' anti-forgery token
	Flash   *flash // the message an action left, if any
	Data    any    // the page's own
}

// render writes the page named name with data, status 200.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	c.renderStatus(w, r, http.StatusOK, name, title, data)
}

func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	p := page{
		Base: base(r), Title: title, Nav: name, Table: c.store.Schema() + "." + c.store.Table(),
		Actions: c.opts.Actions, Data: data, Flash: c.readFlash(r),
	}
	if c.opts.Actions {
		p.Token = c.token
	}
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.log.Error("leasework console: render", "page", name, "err", err)
		http.Error(w, "leasework console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// errorPage is the content of an error page.
type errorPage struct {
	Status  int
	Reason  string // the status's text
	Message string
}

// fail writes an error page: status, and a message for a person.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, message string) {
	c.renderStatus(w, r, status, "error", http.StatusText(status),
		errorPage{Status: status, Reason: http.StatusText(status), Message: message})
}

// dbFail writes the error page of a failed database statement: its text,
// which may hold SQL and server details, goes to the log, not the page.
func (c *Console) dbFail(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.log.Error("leasework console: database", "what", what, "path", r.URL.Path, "err", err)
	msg := "The database could not " + what + ". The details are in the server's log."
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "The database did not " + what + " in time. Try again, or ask for fewer rows."
	}
	c.fail(w, r, http.StatusInternalServerError, msg)
}

// ctx returns the request's context, bounded by Options.Timeout.
func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	if c.opts.Timeout > 0 {
		return context.WithTimeout(r.Context(), c.opts.Timeout)
	}
	return context.WithCancel(r.Context())
}

const timeLayout = "2006-01-02 15:04:05Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

// formatAge writes d to the second, or "-" for zero.
func formatAge(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d < time.Second {
		return "<1s"
	}
	return d.Round(time.Second).String()
}

// short cuts s to n characters, ending it with "…" if it was longer.
func short(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n-1 {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
