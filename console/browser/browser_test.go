package browser

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework/console"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// chromium finds the browser: Debian's chromium package, or another
// Chromium or Chrome on the PATH. Without one the test fails and says what
// to install: a browser test that cannot run is not a pass.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no browser: the console's browser tests need Chromium on the PATH " +
		"(Debian: apt-get install chromium; .ci/run installs it), or chromium-browser or google-chrome")
	return ""
}

// tab is one headless browser tab, and the JavaScript dialogs it saw.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	dialogs []string
}

// newTab starts a headless browser for the test, with extra options of
// its command line, stopped at its end. Any JavaScript dialog (alert,
// confirm, prompt) is recorded and dismissed.
func newTab(t *testing.T, extra ...chromedp.ExecAllocatorOption) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(1280, 900),
		chromedp.DisableGPU,
	)
	opts = append(opts, extra...)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox to root
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	tb := &tab{t: t, ctx: ctx}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, ev.Message)
			tb.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return tb
}

// open loads u and waits for its main element.
func (tb *tab) open(u string) {
	tb.t.Helper()
	resp, err := chromedp.Run(tb.ctx, chromedp.NavigateResponse(u))
	if err != nil {
		tb.t.Fatalf("open %s: %v", u, err)
	}
	if resp.Status != http.StatusOK {
		tb.t.Fatalf("open %s: status %d", u, resp.Status)
	}
	tb.waitMain()
}

// click clicks the element sel finds and waits for the page it leads to.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	resp, err := chromedp.RunResponse(tb.ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		tb.t.Fatalf("click %s: %v", sel, err)
	}
	if resp.Status != http.StatusOK {
		tb.t.Fatalf("click %s: the page it leads to has status %d", sel, resp.Status)
	}
	tb.waitMain()
}

func (tb *tab) waitMain() {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
		tb.t.Fatalf("wait for the page: %v", err)
	}
}

// text is what the page shows: its body's rendered text, each run of
// white space (line breaks between a label and its value) one space.
func (tb *tab) text() string {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		tb.t.Fatal(err)
	}
	return strings.Join(strings.Fields(s), " ")
}

// sees fails the test unless the page shows every one of want.
func (tb *tab) sees(want ...string) {
	tb.t.Helper()
	txt := tb.text()
	for _, w := range want {
		if !strings.Contains(txt, w) {
			loc, _ := chromedp.Run(tb.ctx, chromedp.Location())
			tb.t.Errorf("%s does not show %q; it shows:\n%s", loc, w, txt)
		}
	}
}

// consoleSite serves the console of st, with opts, under /leasework/ as
// an application mounts it, beside the application's other handlers
// given as pattern, handler pairs.
func consoleSite(t *testing.T, st *lease.Store, opts console.Options, others ...any) string {
	t.Helper()
	c, err := console.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/leasework/", http.StripPrefix("/leasework", c))
	for i := 0; i+1 < len(others); i += 2 {
		mux.Handle(others[i].(string), others[i+1].(http.Handler))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/leasework/"
}

// eventually polls cond every 20ms until it holds or a minute passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
