package console

import (
	"strings"
	"testing"
	"time"

	"github.com/leasework/leasework/lease"
)

// The chart has a bar per non-zero count, each as tall as its count on a
// y axis from 0 to a round maximum, labelled at 0, half and the top, with
// the quarter hours labelled on the x axis.
func TestChart(t *testing.T) {
	start := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	minutes := make([]lease.Minute, 60)
	for i := range minutes {
		minutes[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	minutes[10].Done, minutes[10].Failed = 40, 3
	minutes[59].Done = 7
	c := newChart(minutes)
	if c.Done != 47 || c.Failed != 3 || c.Empty {
		t.Errorf("totals %d DONE, %d FAILED, empty %v; want 47, 3, false", c.Done, c.Failed, c.Empty)
	}
	if len(c.Bars) != 3 {
		t.Fatalf("%d bars; want 3: %+v", len(c.Bars), c.Bars)
	}
	var labels []string
	for _, tk := range c.YTicks {
		labels = append(labels, tk.Label)
	}
	if strings.Join(labels, ",") != "0,25,50" {
		t.Errorf("y labels %v; want 0, 25, 50", labels)
	}
	full := c.Foot - c.Top
	if b := c.Bars[0]; b.Class != "done" || b.H != round1(full*40/50) || b.Title != "09:10 UTC: 40 DONE" {
		t.Errorf("first bar %+v; want DONE, %.1f high, titled 09:10", b, full*40/50)
	}
	if b := c.Bars[1]; b.Class != "failed" || b.X <= c.Bars[0].X || b.Y+b.H != c.Foot {
		t.Errorf("second bar %+v; want FAILED, right of the first, standing on the axis", b)
	}
	labels = nil
	for _, tk := range c.XTicks {
		labels = append(labels, tk.Label)
	}
	if strings.Join(labels, ",") != "09:00,09:15,09:30,09:45" {
		t.Errorf("x labels %v; want the quarter hours", labels)
	}
	if e := newChart(minutes[:0]); !e.Empty || len(e.Bars) != 0 {
		t.Errorf("an empty window: %+v", e)
	}
}

func TestRoundUp(t *testing.T) {
	for n, want := range map[int64]int64{0: 1, 1: 1, 2: 2, 3: 5, 6: 10, 11: 20, 47: 50, 51: 100, 999: 1000} {
		if got := roundUp(n); got != want {
			t.Errorf("roundUp(%d) = %d; want %d", n, got, want)
		}
	}
}

// A preview shows text as text, anything else in hex, and cuts at the cap
// on a character boundary.
func TestPreview(t *testing.T) {
	cases := []struct {
		in        string
		max       int
		text, hex string
		shown     int
		truncated bool
	}{
		{"hello\nworld\t!", 100, "hello\nworld\t!", "", 13, false},
		{"", 100, "", "", 0, false},
		{"aé", 2, "a", "", 1, true}, // the cap falls inside é
		{"a\x00b", 100, "", "00000000  61 00 62", 3, false},
		{"\xff\xfe", 1, "", "00000000  ff", 1, true},
	}
	for _, c := range cases {
		p := newPreview([]byte(c.in), c.max)
		if p.Text != c.text || !strings.HasPrefix(p.Hex, c.hex) || p.Shown != c.shown || p.Truncated != c.truncated || p.Size != len(c.in) {
			t.Errorf("newPreview(%q, %d) = %+v; want text %q, hex %q, %d shown, truncated %v", c.in, c.max, p, c.text, c.hex, c.shown, c.truncated)
		}
	}
}
