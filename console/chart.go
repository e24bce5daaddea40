package console

import (
	"fmt"
	"math"

	"github.com/leasework/leasework/lease"
)

// chartMinutes is the chart's window: the last hour.
const chartMinutes = 60

// chart is the overview's bar chart of DONE and FAILED events per minute,
// drawn by the server as SVG: the geometry is computed here, the template
// only writes it out.
type chart struct {
	Width, Height          int     // the viewBox
	Left, Right, Top, Foot float64 // the plot area's edges
	Bars                   []bar
	YTicks, XTicks         []tick
	Done, Failed           int64 // totals over the window
	Empty                  bool  // no event finished in the window
}

type bar struct {
	X, Y, W, H float64
	Class      string // "done" or "failed"
	Title      string // what a pointer over it shows
}

type tick struct {
	X, Y  float64
	Label string
}

// newChart lays out minutes (oldest first) as two bars per minute, DONE
// and FAILED side by side, on a y axis from 0 to a round maximum, with the
// minute of every quarter hour labelled on the x axis (UTC).
func newChart(minutes []lease.Minute) chart {
	c := chart{Width: 760, Height: 240, Left: 56, Right: 748, Top: 16, Foot: 196}
	var peak int64
	for _, m := range minutes {
		c.Done += m.Done
		c.Failed += m.Failed
		peak = max(peak, m.Done, m.Failed)
	}
	c.Empty = c.Done == 0 && c.Failed == 0
	top := roundUp(peak)
	scale := (c.Foot - c.Top) / float64(top)
	for _, v := range []int64{0, top / 2, top} {
		if v == top/2 && top%2 != 0 {
			continue
		}
		c.YTicks = append(c.YTicks, tick{X: c.Left - 6, Y: round1(c.Foot - float64(v)*scale), Label: fmt.Sprint(v)})
	}
	if len(minutes) == 0 {
		return c
	}
	slot := (c.Right - c.Left) / float64(len(minutes))
	w := round1(slot * 0.42)
	for i, m := range minutes {
		x := c.Left + float64(i)*slot
		label := m.Start.UTC().Format("15:04")
		for j, b := range []struct {
			n     int64
			class string
		}{{m.Done, "done"}, {m.Failed, "failed"}} {
			if b.n == 0 {
				continue
			}
			h := round1(float64(b.n) * scale)
			c.Bars = append(c.Bars, bar{
				X: round1(x + slot*0.08 + float64(j)*w), Y: round1(c.Foot - h), W: w, H: h,
				Class: b.class, Title: fmt.Sprintf("%s UTC: %d %s", label, b.n, map[string]string{"done": "DONE", "failed": "FAILED"}[b.class]),
			})
		}
		if m.Start.Minute()%15 == 0 {
			c.XTicks = append(c.XTicks, tick{X: round1(x + slot/2), Y: c.Foot + 16, Label: label})
		}
	}
	return c
}

// roundUp returns the least of 1, 2, 5, 10, 20, 50... at least n (and at
// least 1).
func roundUp(n int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
		if p > math.MaxInt64/100 {
			return n
		}
	}
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }
