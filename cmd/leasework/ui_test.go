package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasework/leasework"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// lockedBuffer is a buffer a running command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveUI runs leasework ui with args until the test ends, and returns the
// address it printed, its output so far, and a function that interrupts
// it and returns its exit status.
func serveUI(t *testing.T, args ...string) (string, *lockedBuffer, func() int) {
	t.Helper()
	ctx, interrupt := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, append([]string{"ui", "-addr", "127.0.0.1:0"}, args...), &stdout, &stderr) }()
	stop := func() int {
		interrupt()
		select {
		case code := <-exit:
			return code
		case <-time.After(time.Minute):
			t.Fatal("leasework ui did not stop within a minute of its interrupt")
			return -1
		}
	}
	t.Cleanup(func() { interrupt() })
	addr := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	deadline := time.Now().Add(time.Minute)
	for {
		if u := addr.FindString(stdout.String()); u != "" {
			return u, &stdout, stop
		}
		select {
		case code := <-exit:
			t.Fatalf("leasework ui exited %d before printing its address\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasework ui printed no address within a minute:\n%s", stdout.String())
		}
	}
}

func fetch(t *testing.T, method, u string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	client := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// leasework ui serves the console of the table named by the common flags,
// read-only by default, prints its address, and exits 0 when interrupted.
func TestUIServesReadOnly(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	pgtest.Enqueue(t, st, lease.Event{Kind: "mail", EventID: "mail-1"})
	u, out, stop := serveUI(t, on(t, st, "pgx")...)
	if !strings.Contains(out.String(), "read-only") || !strings.Contains(out.String(), st.Schema()+".events") {
		t.Errorf("leasework ui's first line does not name the table and say read-only:\n%s", out.String())
	}
	code, body := fetch(t, http.MethodGet, u, nil)
	if code != http.StatusOK || !strings.Contains(body, "Overview") || !strings.Contains(body, "read-only") {
		t.Errorf("GET %s: %d\n%s", u, code, body)
	}
	code, body = fetch(t, http.MethodGet, u+"events", nil)
	if code != http.StatusOK || !strings.Contains(body, "mail-1") {
		t.Errorf("GET %sevents: %d, no mail-1\n%s", u, code, body)
	}
	if code, _ := fetch(t, http.MethodPost, u+"queues/pause", url.Values{"queue": {"default"}}); code != http.StatusForbidden {
		t.Errorf("POST queues/pause on a read-only ui: %d, want 403", code)
	}
	if code := stop(); code != exitOK {
		t.Errorf("leasework ui exited %d when interrupted; want 0\n%s", code, out.String())
	}
}

// With -actions its forms act, and each action is logged; with -json it
// prints its address as JSON.
func TestUIActions(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	u, out, stop := serveUI(t, append(on(t, st, "pgx"), "-actions", "-json")...)
	var first uiJSON
	line, _, _ := strings.Cut(out.String(), "\n}")
	if err := json.Unmarshal([]byte(line+"\n}"), &first); err != nil || first.URL != u || !first.Actions {
		t.Errorf("leasework ui -json printed %q (%v); want {url: %s, actions: true}", line, err, u)
	}
	_, body := fetch(t, http.MethodGet, u+"queues", nil)
	tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if tok == nil {
		t.Fatalf("the queues page of leasework ui -actions has no form:\n%s", body)
	}
	code, _ := fetch(t, http.MethodPost, u+"queues/pause", url.Values{"csrf": {tok[1]}, "queue": {"bulk"}})
	if code != http.StatusSeeOther {
		t.Errorf("POST queues/pause: %d, want 303", code)
	}
	qs, err := st.Queues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].Name != "bulk" || qs[0].Paused.IsZero() {
		t.Errorf("after the pause: %+v, %v; want bulk paused", qs, err)
	}
	if code := stop(); code != exitOK {
		t.Errorf("leasework ui exited %d when interrupted; want 0", code)
	}
	if !strings.Contains(out.String(), `"action":"pause"`) {
		t.Errorf("leasework ui did not log the pause:\n%s", out.String())
	}
}

// A bad -addr is a usage error; an address in use is a runtime error.
func TestUIBadAddress(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	for _, addr := range []string{"", "8080", "localhost:"} {
		r := must(t, exitUsage, append([]string{"ui", "-addr", addr}, on(t, st, "pgx")...)...)
		if !strings.Contains(r.stderr, "-addr") {
			t.Errorf("leasework ui -addr %q: stderr does not name -addr:\n%s", addr, r.stderr)
		}
	}
	u, _, _ := serveUI(t, on(t, st, "pgx")...)
	busy := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")
	r := must(t, exitError, append([]string{"ui", "-addr", busy}, on(t, st, "pgx")...)...)
	if !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("leasework ui on a busy address: stderr:\n%s", r.stderr)
	}
}

// send makes one request as a browser on a page of host would: Host is
// host, and the extra headers are given as name, value pairs.
func send(t *testing.T, method, u, host string, form url.Values, headers ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// After DNS rebinding, a page of attacker.example reaches leasework ui
// -actions on 127.0.0.1 under its own name, as its own origin. Its
// requests carry Host: attacker.example:<port>, and every one is refused
// with 403 before anything is rendered: the overview, the event's page
// (payload and form token), and a cancel carrying the token and a
// same-origin Origin. The event stays READY. The console still serves its
// own names: 127.0.0.1:<port> and localhost:<port>, and no other port or
// address.
func TestUIRefusesRebinding(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	id := pgtest.Enqueue(t, st, lease.Event{Kind: "mail", EventID: "mail-secret", Payload: []byte("payload-secret")})[0].ID
	u, out, _ := serveUI(t, append(on(t, st, "pgx"), "-actions")...)
	port := strings.TrimSuffix(u[strings.LastIndex(u, ":")+1:], "/")
	ev := u + "events/" + strconv.FormatInt(id, 10)
	_, body := fetch(t, http.MethodGet, ev, nil)
	tok := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if tok == nil {
		t.Fatalf("the event page of leasework ui -actions has no form:\n%s", body)
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "Attacker.Example.:" + port, "localhost.attacker.example:" + port, "[::1]:" + port, "127.0.0.1:1" + port, "localhost:1" + port, "10.1.2.3:" + port} {
		for _, page := range []string{u, u + "events", ev, u + "queues", u + "keys"} {
			code, body := send(t, http.MethodGet, page, host, nil)
			if code != http.StatusForbidden || strings.Contains(body, "payload-secret") || strings.Contains(body, "mail-secret") || strings.Contains(body, tok[1]) || !strings.Contains(body, "-allow-host") {
				t.Errorf("GET %s with Host %s: %d; want 403 saying -allow-host, and nothing of the console\n%s", page, host, code, body)
			}
		}
		code, body := send(t, http.MethodPost, ev+"/cancel", host, url.Values{"csrf": {tok[1]}, "reason": {"rebound"}},
			"Origin", "http://"+host, "Sec-Fetch-Site", "same-origin")
		if code != http.StatusForbidden {
			t.Errorf("POST cancel with Host %s: %d; want 403\n%s", host, code, body)
		}
	}
	if r, err := st.Get(t.Context(), id); err != nil || r.Status != leasework.StatusReady {
		t.Errorf("after the rebound cancels the event is %+v (%v); want READY", r, err)
	}
	if !strings.Contains(out.String(), "host not allowed") {
		t.Errorf("leasework ui did not log the refusals:\n%s", out.String())
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port} {
		if code, body := send(t, http.MethodGet, ev, host, nil); code != http.StatusOK || !strings.Contains(body, "payload-secret") {
			t.Errorf("GET %s with Host %s: %d; want the event's page\n%s", ev, host, code, body)
		}
	}
	code, body := send(t, http.MethodPost, ev+"/cancel", "localhost:"+port, url.Values{"csrf": {tok[1]}, "reason": {"by hand"}},
		"Origin", "http://localhost:"+port, "Sec-Fetch-Site", "same-origin")
	if r, err := st.Get(t.Context(), id); code != http.StatusSeeOther || err != nil || r.Status != leasework.StatusDiscarded {
		t.Errorf("POST cancel with Host localhost:%s: %d; the event is %+v (%v); want 303 and DISCARDED\n%s", port, code, r, err, body)
	}
}

// -allow-host adds names to those of the listen address: a name alone at
// any port, a name with a port at that port; repeated, or separated by
// commas. A value that is not a host name is a usage error.
func TestUIAllowHost(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	u, _, _ := serveUI(t, append(on(t, st, "pgx"), "-allow-host", "ops.example", "-allow-host", "a.example:8443,[2001:db8::7]")...)
	port := strings.TrimSuffix(u[strings.LastIndex(u, ":")+1:], "/")
	for host, want := range map[string]int{
		"ops.example:" + port: http.StatusOK, "ops.example": http.StatusOK, "OPS.example.:9": http.StatusOK,
		"a.example:8443": http.StatusOK, "a.example:" + port: http.StatusForbidden, "a.example": http.StatusForbidden,
		"[2001:db8::7]:" + port: http.StatusOK, "[2001:db8::8]:" + port: http.StatusForbidden,
		"127.0.0.1:" + port: http.StatusOK, "localhost:" + port: http.StatusOK, "b.example:" + port: http.StatusForbidden,
	} {
		if code, body := send(t, http.MethodGet, u, host, nil); code != want {
			t.Errorf("GET with Host %s: %d, want %d\n%s", host, code, want, body)
		}
	}
	for _, bad := range []string{"http://ops.example", "*.example", "ops.example:", "::1"} {
		r := must(t, exitUsage, append([]string{"ui", "-allow-host", bad}, on(t, st, "pgx")...)...)
		if !strings.Contains(r.stderr, "-allow-host") || !strings.Contains(r.stderr, strconv.Quote(bad)) {
			t.Errorf("leasework ui -allow-host %q: stderr does not name the flag and the value:\n%s", bad, r.stderr)
		}
	}
}

// The names of a listen address: the name -addr gives, the address the
// listener has, and localhost for a loopback address; for an unspecified
// address (":8080"), localhost and every address of the machine's
// interfaces. Each at the listener's port.
func TestUIListenNames(t *testing.T) {
	for _, c := range []struct {
		addr string
		ip   string
		want []string
	}{
		{"127.0.0.1:8080", "127.0.0.1", []string{"127.0.0.1:8080", "localhost:8080"}},
		{"localhost:8080", "127.0.0.1", []string{"localhost:8080", "127.0.0.1:8080"}},
		{"LocalHost.:8080", "::1", []string{"localhost:8080", "[::1]:8080"}},
		{"[::1]:0", "::1", []string{"[::1]:8080", "localhost:8080"}},
		{"127.0.0.2:8080", "127.0.0.2", []string{"127.0.0.2:8080", "localhost:8080"}},
		{"ops.lan:8080", "192.0.2.5", []string{"ops.lan:8080", "192.0.2.5:8080"}},
		{"192.0.2.5:8080", "192.0.2.5", []string{"192.0.2.5:8080"}},
	} {
		got := listenNames(c.addr, &net.TCPAddr{IP: net.ParseIP(c.ip), Port: 8080}, nil)
		if !slices.Equal(got, c.want) {
			t.Errorf("listenNames(%q, %s:8080) = %q, want %q", c.addr, c.ip, got, c.want)
		}
	}
	ifaces := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5"), netip.MustParseAddr("::1")}
	for _, addr := range []string{":8080", "0.0.0.0:8080", "[::]:8080"} {
		got := listenNames(addr, &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, ifaces)
		want := []string{"localhost:8080", "127.0.0.1:8080", "192.0.2.5:8080", "[2001:db8::5]:8080", "[::1]:8080"}
		if !slices.Equal(got, want) {
			t.Errorf("listenNames(%q, [::]:8080) = %q, want %q", addr, got, want)
		}
	}
}
