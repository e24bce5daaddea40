package main

import (
	"strings"
	"testing"

	"github.com/leasework/leasework/internal/rig/pgtest"
	"github.com/leasework/leasework/lease"
)

// pause and resume a queue, through both drivers, as queues and stats
// show it; a missing or bad -queue is a usage error.
func TestPauseAndResumeAQueue(t *testing.T) {
	t.Parallel()
	for _, d := range pgtest.Drivers {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			st := pgtest.Store(t, d.New(), lease.Options{})
			pgtest.Enqueue(t, st, lease.Event{Kind: "k", Queue: "mail"}, lease.Event{Kind: "k"})

			var p pauseJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "pause", "-queue", "mail", "-json")...), &p)
			if !p.Paused || !p.Changed || p.Queue != "mail" {
				t.Errorf("pause -json = %+v; want mail paused, changed", p)
			}
			if r := must(t, exitOK, on(t, st, d.Name, "pause", "-queue", "mail")...); !strings.Contains(r.stdout, "already paused") {
				t.Errorf("pause again: %q; want it to say the queue was already paused", r.stdout)
			}

			var qs []queueJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "queues", "-json")...), &qs)
			if len(qs) != 2 || qs[0].Name != "default" || qs[0].PausedAt != nil || qs[0].Ready != 1 ||
				qs[1].Name != "mail" || qs[1].PausedAt == nil || qs[1].Ready != 1 || qs[1].Eligible != 1 {
				t.Errorf("queues -json = %+v; want default running and mail paused, one READY row each", qs)
			}
			var s statsJSON
			decode(t, must(t, exitOK, on(t, st, d.Name, "stats", "-json")...), &s)
			if len(s.PausedQueues) != 1 || s.PausedQueues[0] != "mail" {
				t.Errorf("stats -json paused_queues = %v; want [mail]", s.PausedQueues)
			}
			if r := must(t, exitOK, on(t, st, d.Name, "stats")...); !strings.Contains(r.stdout, "paused queues") || !strings.Contains(r.stdout, "mail") {
				t.Errorf("stats does not show the paused queue:\n%s", r.stdout)
			}

			if r := must(t, exitOK, on(t, st, d.Name, "resume", "-queue", "mail")...); !strings.Contains(r.stdout, "resumed queue mail") {
				t.Errorf("resume: %q", r.stdout)
			}
			decode(t, must(t, exitOK, on(t, st, d.Name, "resume", "-queue", "mail", "-json")...), &p)
			if p.Paused || p.Changed {
				t.Errorf("resume of a running queue -json = %+v; want not paused, unchanged", p)
			}

			for _, args := range [][]string{{"pause"}, {"resume", "-queue", ""}, {"pause", "-queue", "a\x00b"}} {
				if r := must(t, exitUsage, on(t, st, d.Name, args...)...); !strings.Contains(r.stderr, "-queue") {
					t.Errorf("%v: stderr %q; want a usage error naming -queue", args, r.stderr)
				}
			}
		})
	}
}

// list -queue lists one queue's rows, with their queue and priority.
func TestListOneQueue(t *testing.T) {
	t.Parallel()
	st := pgtest.Store(t, pgtest.Drivers[0].New(), lease.Options{})
	pgtest.Enqueue(t, st, lease.Event{Kind: "k", Queue: "mail", Priority: 3}, lease.Event{Kind: "k"})
	var got listJSON
	decode(t, must(t, exitOK, on(t, st, "pgx", "list", "-queue", "mail", "-json")...), &got)
	if len(got.Rows) != 1 || got.Rows[0].Queue != "mail" || got.Rows[0].Priority != 3 {
		t.Errorf("list -queue mail -json = %+v; want the one mail row, priority 3", got.Rows)
	}
}
