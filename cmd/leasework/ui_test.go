package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/pgtest"
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
