package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// prefix is where the tests mount the console, as an application would.
const prefix = "/ops/leasework"

// site is a console mounted under prefix on a test server, with a client
// that does not follow redirects.
type site struct {
	t      *testing.T
	store  *lease.Store
	srv    *httptest.Server
	client *http.Client
}

// newSite serves a console of a fresh table with opts, mounted the way the
// package doc shows.
func newSite(t *testing.T, opts console.Options) *site {
	t.Helper()
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	return newSiteOf(t, st, opts)
}

func newSiteOf(t *testing.T, st *lease.Store, opts console.Options) *site {
	t.Helper()
	c, err := console.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := &http.Client{
		Timeout:       time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &site{t: t, store: st, srv: srv, client: client}
}

// page is one response: its status, headers and body.
type page struct {
	status int
	header http.Header
	body   string
	url    string
}

// text is what a person reads on the page: the body without its tags,
// entities decoded, white space collapsed.
func (p page) text() string { return visible(p.body) }

var (
	tags   = regexp.MustCompile(`(?s)<[^>]*>`)
	spaces = regexp.MustCompile(`\s+`)
)

func visible(body string) string {
	// Drop the head: its title and link are not on the page.
	if _, after, ok := strings.Cut(body, "</head>"); ok {
		body = after
	}
	return strings.TrimSpace(spaces.ReplaceAllString(html.UnescapeString(tags.ReplaceAllString(body, " ")), " "))
}

// url returns the absolute address of path, relative to the console's
// root ("events/3"), or to the server's root when it starts with "/".
func (s *site) url(path string) string {
	if strings.HasPrefix(path, "/") {
		return s.srv.URL + path
	}
	return s.srv.URL + prefix + "/" + path
}

func (s *site) do(req *http.Request) page {
	s.t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(b), url: req.URL.String()}
}

// get fetches path and fails the test unless the status is want.
func (s *site) get(path string, want int) page {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url(path), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	p := s.do(req)
	if p.status != want {
		s.t.Fatalf("GET %s: status %d, want %d\n%s", path, p.status, want, p.text())
	}
	return p
}

// post sends form to path with the extra headers given as name, value
// pairs, and returns the response, not following a redirect.
func (s *site) post(path string, form url.Values, headers ...string) page {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url(path), strings.NewReader(form.Encode()))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return s.do(req)
}

// follow fetches the page a 303 response sends the browser to, resolving
// its Location against the address that answered, as a browser does.
func (s *site) follow(p page) page {
	s.t.Helper()
	if p.status != http.StatusSeeOther {
		s.t.Fatalf("POST %s: status %d, want 303 See Other\n%s", p.url, p.status, p.text())
	}
	from, err := url.Parse(p.url)
	if err != nil {
		s.t.Fatal(err)
	}
	to, err := from.Parse(p.header.Get("Location"))
	if err != nil {
		s.t.Fatal(err)
	}
	if !strings.HasPrefix(to.Path, prefix+"/") {
		s.t.Errorf("POST %s redirects to %s, outside the console's prefix %s", p.url, to, prefix)
	}
	return s.get(to.Path+"?"+to.RawQuery, http.StatusOK)
}

// token reads the anti-forgery token of the first form of a page.
func token(t *testing.T, p page) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("%s has no form with a token:\n%s", p.url, p.text())
	}
	return m[1]
}

// contains fails the test unless the page's text has every one of want.
func contains(t *testing.T, p page, want ...string) {
	t.Helper()
	txt := p.text()
	for _, w := range want {
		if !strings.Contains(txt, w) {
			t.Errorf("%s does not say %q; it says:\n%s", p.url, w, txt)
		}
	}
}

// lacks fails the test if the page's text has any of bad.
func lacks(t *testing.T, p page, bad ...string) {
	t.Helper()
	txt := p.text()
	for _, b := range bad {
		if strings.Contains(txt, b) {
			t.Errorf("%s says %q; it should not:\n%s", p.url, b, txt)
		}
	}
}

// failedEvent enqueues ev with a budget of one attempt, claims it and
// fails it with reason; it returns its row.
func failedEvent(t *testing.T, st *lease.Store, ev lease.Event, reason string) lease.Row {
	t.Helper()
	ctx := context.Background()
	ev.MaxAttempts = 1
	id := pgtest.Enqueue(t, st, ev)[0].ID
	claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute, Queue: ev.Queue, Kinds: []string{ev.Kind}})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("claim row %d: %+v, %v", id, claims, err)
	}
	if _, err := st.Write(ctx, lease.Fail(claims[0].Ref(), reason)); err != nil {
		t.Fatal(err)
	}
	return row(t, st, id)
}

func row(t *testing.T, st *lease.Store, id int64) lease.Row {
	t.Helper()
	r, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
