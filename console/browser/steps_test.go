package browser

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/leasework/leasework"
	"github.com/leasework/leasework/console"
	pgxdriver "github.com/leasework/leasework/driver/pgx"
	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// An operator opens a finished order's page from the events list and reads
// what its handler recorded: its two steps in the order they were
// recorded, each with the generation of the attempt that recorded it
// (the first attempt reserved and gave its claim back, the second
// charged), and its output.
func TestEventPageShowsStepsAndOutput(t *testing.T) {
	st := pgtest.Store(t, pgxdriver.New(), lease.Options{})
	ctx := context.Background()
	id := pgtest.Enqueue(t, st, lease.Event{Kind: "order.place", EventID: "order-7"})[0].ID
	claim := func() leasework.Claim {
		t.Helper()
		claims, err := st.Claim(ctx, lease.ClaimRequest{Limit: 1, Lease: time.Minute})
		if err != nil || len(claims) != 1 || claims[0].ID != id {
			t.Fatalf("claim: %+v, %v; want row %d", claims, err, id)
		}
		return claims[0]
	}
	write := func(ws ...lease.Write) {
		t.Helper()
		for _, w := range ws {
			if _, err := st.Write(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := claim()
	write(lease.Step(first.Ref(), "reserve", []byte(`{"sku":"x"}`)), lease.Release(first.Ref()))
	second := claim()
	write(lease.Step(second.Ref(), "charge", []byte(`{"charge":"ch_1"}`)),
		lease.Output(second.Ref(), []byte(`{"order":7,"status":"placed"}`)), lease.Complete(second.Ref()))

	tb := newTab(t)
	site := consoleSite(t, st, console.Options{})
	tb.open(site + "events")
	tb.click(fmt.Sprintf(`a[href$="events/%d"]`, id))
	tb.sees("Event "+fmt.Sprint(id)+" DONE", "Generation 2", "2 steps, in the order recorded",
		`Output 29 bytes. {"order":7,"status":"placed"}`)

	// The steps' table, cell by cell: #, name, generation, when, size,
	// value.
	rows, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll("table.steps tbody tr"), tr => Array.from(tr.cells, td => td.innerText.trim()))`))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"1", "reserve", "1", "", "11 bytes", `{"sku":"x"}`}, {"2", "charge", "2", "", "17 bytes", `{"charge":"ch_1"}`}}
	if len(rows) == 2 {
		// When each was recorded, as the store read it.
		r, err := st.Get(ctx, id)
		if err != nil || len(r.Steps) != 2 {
			t.Fatalf("get row %d: %+v, %v", id, r.Steps, err)
		}
		for i := range want {
			want[i][3] = r.Steps[i].At.UTC().Format("2006-01-02 15:04:05Z07:00")
		}
	}
	if !slices.EqualFunc(rows, want, slices.Equal) {
		t.Errorf("the steps' table shows %q; want %q", rows, want)
	}
}
