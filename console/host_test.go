package console_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// send makes req with Host set to host (as a browser does when the page's
// address names host) and the extra headers given as name, value pairs.
func (s *site) send(method, path, host string, form url.Values, headers ...string) page {
	s.t.Helper()
	var req *http.Request
	var err error
	if form != nil {
		req, err = http.NewRequest(method, s.url(path), strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		req, err = http.NewRequest(method, s.url(path), nil)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return s.do(req)
}

// port is the test server's port.
func (s *site) port() string {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(s.srv.URL, "http://"))
	if err != nil {
		s.t.Fatal(err)
	}
	return port
}

// refused fails the test unless p is the host refusal: 403, and nothing of
// the console in it (no page, no token, no event).
func refused(t *testing.T, p page, host string, secrets ...string) {
	t.Helper()
	if p.status != http.StatusForbidden {
		t.Errorf("%s with Host %q: status %d, want 403\n%s", p.url, host, p.status, p.text())
	}
	if !strings.Contains(p.body, "does not answer to the host name") {
		t.Errorf("%s with Host %q: the refusal does not say why:\n%s", p.url, host, p.body)
	}
	for _, s := range append(secrets, "Overview", "csrf", "<form", "<html") {
		if strings.Contains(p.body, s) {
			t.Errorf("%s with Host %q: the refusal shows %q:\n%s", p.url, host, s, p.body)
		}
	}
}

// After DNS rebinding, a page of attacker.example reaches a console on a
// loopback address under its own name: its requests are same-origin to the
// browser and carry Host: attacker.example[:port]. Every one of them is
// refused before anything is read or rendered: the overview, the event's
// page and its payload, the form token, the stylesheet, and a cancel that
// carries a valid token and a same-origin Origin. The event is untouched.
func TestRebindingHostIsRefused(t *testing.T) {
	s := newSite(t, console.Options{Actions: true})
	secret := "payload-secret-7f3a"
	id := pgtest.Enqueue(t, s.store, lease.Event{Kind: "mail", EventID: "ev-secret-1", Payload: []byte(secret)})[0].ID
	tok := token(t, s.get(fmt.Sprintf("events/%d", id), http.StatusOK)) // the attacker does not have it; the check must not need that
	port := s.port()

	for _, host := range []string{
		"attacker.example:" + port,
		"attacker.example",
		"attacker.example.:" + port,
		"ATTACKER.Example:" + port,
		"localhost.attacker.example:" + port,
		"127.0.0.1.attacker.example:" + port,
		"localhost:" + port + ".attacker.example",
		"xn--80ak6aa92e.com:" + port,
		"127.1:" + port, // not a literal a browser sends; a name to DNS
		"[::1:" + port,
	} {
		for _, path := range []string{"", "events", fmt.Sprintf("events/%d", id), "queues", "keys", "static/console.css", "no-such-page"} {
			refused(t, s.send(http.MethodGet, path, host, nil), host, secret, "ev-secret-1", tok)
		}
		origin := "http://" + host
		p := s.send(http.MethodPost, fmt.Sprintf("events/%d/cancel", id), host,
			url.Values{"csrf": {tok}, "reason": {"rebound"}},
			"Origin", origin, "Sec-Fetch-Site", "same-origin")
		refused(t, p, host, tok)
		p = s.send(http.MethodPost, "queues/pause", host, url.Values{"csrf": {tok}, "queue": {"default"}},
			"Origin", origin, "Sec-Fetch-Site", "same-origin")
		refused(t, p, host, tok)
	}
	if r := row(t, s.store, id); r.Status != leasework.StatusReady {
		t.Errorf("after the refused cancels the event is %s; want READY", r.Status)
	}
	if qs, err := s.store.Queues(t.Context()); err != nil || len(qs) != 1 || !qs[0].Paused.IsZero() {
		t.Errorf("after the refused pauses the queues are %+v (%v); want default running", qs, err)
	}

	// The console still answers its own addresses, and acts from them.
	p := s.send(http.MethodPost, fmt.Sprintf("events/%d/cancel", id), "127.0.0.1:"+port,
		url.Values{"csrf": {tok}, "reason": {"by hand"}}, "Origin", "http://127.0.0.1:"+port, "Sec-Fetch-Site", "same-origin")
	if p.status != http.StatusSeeOther {
		t.Fatalf("cancel from the console's own address: status %d\n%s", p.status, p.text())
	}
	if r := row(t, s.store, id); r.Status != leasework.StatusDiscarded {
		t.Errorf("after the cancel from the console's own address the event is %s; want DISCARDED", r.Status)
	}
}

// With no Options.AllowedHosts the console answers to the names no DNS
// answer decides, at any port: localhost and IP address literals (in any
// case, with or without a trailing dot or a port; IPv6 in brackets, in any
// spelling). Any other name is refused.
func TestDefaultHostsAreLiteralsAndLocalhost(t *testing.T) {
	s := newSite(t, console.Options{})
	port := s.port()
	for _, host := range []string{
		"127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "localhost", "LocalHost:" + port,
		"localhost.:" + port, "[::1]:" + port, "[::1]", "[0:0:0:0:0:0:0:1]:" + port, "[::ffff:127.0.0.1]:" + port,
		"10.1.2.3:8080", "[2001:db8::1]:443",
	} {
		if p := s.send(http.MethodGet, "", host, nil); p.status != http.StatusOK || !strings.Contains(p.text(), "Overview") {
			t.Errorf("GET with Host %q: status %d, want the overview\n%s", host, p.status, p.text())
		}
	}
	for _, host := range []string{"ops.example.com", "ops.example.com:" + port, "localhost.localdomain:" + port, "sub.localhost:" + port, "::1", "::1:" + port, "localhost:0x50", "localhost:+80", "localhost:", "localhost:99999"} {
		refused(t, s.send(http.MethodGet, "", host, nil), host)
	}
}

// Options.AllowedHosts replaces the default: the console answers to the
// names listed, a name without a port at any port, a name with a port at
// that port only (a Host without one has the default port, 80 here), and
// to nothing else, the loopback addresses included.
func TestAllowedHosts(t *testing.T) {
	s := newSite(t, console.Options{AllowedHosts: []string{"Ops.Example.com.", "console.example:8443", "[::1]:9000", "10.0.0.7", "legacy:80"}})
	for _, host := range []string{
		"ops.example.com", "OPS.example.COM.", "ops.example.com:443", "ops.example.com:9999",
		"console.example:8443", "CONSOLE.example.:8443", "[::1]:9000", "[0::1]:9000", "10.0.0.7", "10.0.0.7:1234",
		"legacy", "legacy:80",
	} {
		if p := s.send(http.MethodGet, "events", host, nil); p.status != http.StatusOK {
			t.Errorf("GET with Host %q: status %d, want 200\n%s", host, p.status, p.text())
		}
	}
	for _, host := range []string{
		"console.example", "console.example:8444", "[::1]:9001", "[::1]", "legacy:8080",
		"127.0.0.1:" + s.port(), "localhost:" + s.port(), "10.0.0.8",
		"attacker.example", "evil-ops.example.com", "ops.example.com.attacker.example", "x.ops.example.com",
	} {
		refused(t, s.send(http.MethodGet, "events", host, nil), host)
	}
}

// A request without a Host (HTTP/1.0 allows it) is refused too: nothing
// says which site the browser thought it was on.
func TestNoHostIsRefused(t *testing.T) {
	s := newSite(t, console.Options{})
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.srv.URL, "http://"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(conn, "GET %s/ HTTP/1.0\r\n\r\n", prefix); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET without Host: status %d, want 403", resp.StatusCode)
	}
}

// New refuses an entry of Options.AllowedHosts that is not a host name or
// address with an optional port, naming the field and the entry.
func TestAllowedHostsChecked(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	for _, bad := range []string{"", "http://ops.example.com", "ops.example.com/", "ops example", "ops.example.com:", "ops.example.com:x", "ops.example.com:70000", "[::1", "::1", "::1:8080", "[127.0.0.1]", "*.example.com", "a..b", "."} {
		_, err := console.New(st, console.Options{AllowedHosts: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), "Options.AllowedHosts") || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("New with AllowedHosts %q: %v; want an error naming the field and the entry", bad, err)
		}
	}
	for _, good := range []string{"ops.example.com", "ops-1.example.com:8080", "10.0.0.1", "10.0.0.1:80", "[::1]", "[::1]:8080", "localhost.", "under_score.internal"} {
		if _, err := console.New(st, console.Options{AllowedHosts: []string{good}}); err != nil {
			t.Errorf("New with AllowedHosts %q: %v", good, err)
		}
	}
}
