package history

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// good builds a history in which every promise holds, with something for
// every property to check.
func good() *builder {
	b := newBuilder()
	e := b.enqueue(0, ev{id: "e1"})
	b.handle(e[0], "w1", 10)

	// A key's head and its follower.
	k := b.enqueue(20, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
	b.handle(k[0], "w1", 30)
	b.handle(k[1], "w2", 40)

	// A key whose head's completion takes the follower's turn: claimed
	// in the transaction that finishes the head, it runs after.
	tk := b.enqueue(42, ev{id: "tk1", key: "tk"}, ev{id: "tk2", key: "tk"})
	b.claim(tk[0], "w1", 43)
	b.run(tk[0], "w1", 44, 45, ResultOK, 0)
	next := b.takeTurn(tk[0], 46)
	b.run(next, "w1", 47, 48, ResultOK, 0)
	b.finish(next, 49, Done)

	// A Transactional event: its effect commits with its completion.
	t := b.enqueue(50, ev{id: "t1", kind: txKind})
	b.handleTx(t[0], "w2", 60)

	// A snooze, a failure, then success: the policy's cap of 3 is not
	// reached, and the retry waits the delay of failure 1.
	s := b.enqueue(70, ev{id: "s1", kind: snoozy})
	b.claim(s[0], "w1", 80)
	b.run(s[0], "w1", 81, 82, ResultSnooze, 5*ms)
	b.retry(s[0], 83, 5*ms, true)
	b.claim(s[0], "w1", 90)
	b.run(s[0], "w1", 91, 92, ResultError, 0)
	b.retry(s[0], 93, testPolicy.Delay(1), false)
	b.claim(s[0], "w2", 110)
	b.run(s[0], "w2", 111, 112, ResultOK, 0)
	b.finish(s[0], 113, Done)

	// A retry after the delay the handler asked.
	a := b.enqueue(120, ev{id: "a1"})
	b.claim(a[0], "w1", 130)
	b.run(a[0], "w1", 131, 132, ResultRetryAfter, 50*ms)
	b.retry(a[0], 133, 50*ms, false)
	b.handle(a[0], "w2", 190)

	// A stopped owner: its lease expires by the fixture, another worker
	// takes the row; the stopped handler runs on, no longer live, while
	// the key's next row runs.
	st := b.enqueue(200, ev{id: "st1", key: "st"}, ev{id: "st2", key: "st"})
	b.claim(st[0], "w1", 210)
	b.run(st[0], "w1", 211, 400, ResultOK, 0)
	b.write(st[0], op, 220, func(s *State) { s.LeaseUntil = b.at(219) })
	b.handle(st[0], "w2", 230)
	b.handle(st[1], "w3", 240)
	b.h.Faults = append(b.h.Faults, Fault{Kind: "stop", Worker: "w1", Start: b.at(215), End: b.at(401)})

	// A worker stopped between its claim and its handler's start: the
	// handler starts after the next owner's, when its lease has ended
	// (the fixture), and is never live.
	zs := b.enqueue(245, ev{id: "zs1", key: "zs"}, ev{id: "zs2", key: "zs"})
	b.claim(zs[0], "w1", 246)
	b.write(zs[0], op, 247, func(s *State) { s.LeaseUntil = b.at(246) })
	b.claim(zs[0], "w2", 248)
	b.run(zs[0], "w2", 249, 250, ResultOK, 0)
	b.h.Runs = append(b.h.Runs, Run{Worker: "w1", Row: zs[0], EventID: "zs1", Kind: plain, Generation: 1,
		Start: b.at(249), End: b.at(262), Result: ResultOK})
	b.finish(zs[0], 251, Done)
	b.handle(zs[1], "w3", 252)

	// A running Transactional head cancelled: its effect never commits,
	// and its follower starts once the cancelled handler has stopped.
	c := b.enqueue(250, ev{id: "c1", key: "c", kind: txKind}, ev{id: "c2", key: "c"})
	b.claim(c[0], "w1", 260)
	b.run(c[0], "w1", 261, 290, ResultError, 0)
	b.cancel(c[0], 270)
	b.handle(c[1], "w2", 300)

	// A cancel that only marks a running head: its owner stops when its
	// handler has returned, and only then does the key pass on.
	mk := b.enqueue(340, ev{id: "mk1", key: "mk", kind: txKind}, ev{id: "mk2", key: "mk"})
	b.claim(mk[0], "w1", 341)
	b.run(mk[0], "w1", 342, 380, ResultError, 0)
	b.mark(mk[0], 350)
	// Cancelled again: the row is marked already.
	b.h.Cancels = append(b.h.Cancels, Cancel{EventID: "mk1", Row: mk[0], Invoked: b.at(360), Returned: b.at(361),
		Result: CancelOK, Generation: b.gen(mk[0]), Stopping: true})
	b.stop(mk[0], "w1", 381)
	b.handle(mk[1], "w2", 385)
	// A marked head whose owner died: a claim ends it once its lease ended.
	md := b.enqueue(390, ev{id: "md1", key: "md"}, ev{id: "md2", key: "md"})
	b.claim(md[0], "w5", 391)
	b.run(md[0], "w5", 392, -1, "", 0)
	b.h.Processes["w5"] = Process{Exited: b.at(393)}
	b.mark(md[0], 395)
	b.stop(md[0], "w2", 391+lease+1)
	b.handle(md[1], "w2", 391+lease+5)

	// A waiting follower cancelled; its head goes on.
	wk := b.enqueue(310, ev{id: "wk1", key: "wk"}, ev{id: "wk2", key: "wk"})
	b.claim(wk[0], "w1", 320)
	b.cancel(wk[1], 325)
	b.run(wk[0], "w1", 321, 330, ResultOK, 0)
	b.finish(wk[0], 331, Done)

	// A cancel that found the event finished.
	b.h.Cancels = append(b.h.Cancels, Cancel{EventID: "e1", Row: e[0], Invoked: b.at(400), Returned: b.at(401), Result: CancelFinished})

	// An event that asks to fail.
	f := b.enqueue(410, ev{id: "f1", want: Failed})
	b.claim(f[0], "w1", 420)
	b.run(f[0], "w1", 421, 422, ResultFail, 0)
	b.finish(f[0], 423, Failed)

	// A paused queue: nothing of it claimed until it resumes.
	q := b.enqueue(500, ev{id: "q1", queue: "bulk"})
	b.h.Pauses = append(b.h.Pauses, Pause{Queue: "bulk", Paused: b.at(501), Resumed: b.at(600)})
	b.handle(q[0], "w1", 610)

	// A killed worker: its run has no end; the row is claimed again once
	// its lease ended.
	kd := b.enqueue(700, ev{id: "kd1", key: "kd"}, ev{id: "kd2", key: "kd"})
	b.claim(kd[0], "w4", 710)
	b.run(kd[0], "w4", 711, -1, "", 0)
	b.h.Processes["w4"] = Process{Exited: b.at(720)}
	b.handle(kd[0], "w1", 810)
	b.handle(kd[1], "w1", 820)

	// A kind under a limit of 2, always full: a claim takes the slot of
	// an attempt that ended at that instant; one takes the slot of a
	// killed owner's attempt at the instant its lease ran out; a renewal
	// extends an attempt, and the expiry fixture ends it at its write
	// (not at the lease it writes, a second earlier), when a claim takes
	// its slot.
	b.limit(ScopeKind, lim, 2, 880)
	l := b.enqueue(900, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim}, ev{id: "l3", kind: lim}, ev{id: "l4", kind: lim})
	b.claim(l[0], "w1", 902)
	b.run(l[0], "w1", 903, 905, ResultOK, 0)
	b.claim(l[1], "w6", 904)
	b.run(l[1], "w6", 905, -1, "", 0)
	b.h.Processes["w6"] = Process{Exited: b.at(910)}
	b.finish(l[0], 906, Done)
	b.claim(l[2], "w2", 906)
	b.run(l[2], "w2", 907, 1100, ResultError, 0) // stopped, and told its lease was lost
	b.renew(l[2], 950)
	b.claim(l[3], "w3", 904+lease)
	b.run(l[3], "w3", 904+lease+1, 904+lease+2, ResultOK, 0)
	b.expire(l[2], 1010)
	b.h.Faults = append(b.h.Faults, Fault{Kind: "stop", Worker: "w2", Start: b.at(1000), End: b.at(1101)})
	b.claim(l[1], "w1", 1010)
	b.run(l[1], "w1", 1011, 1012, ResultOK, 0)
	b.finish(l[1], 1013, Done)
	b.finish(l[3], 1015, Done)
	b.claim(l[2], "w3", 1020)
	b.run(l[2], "w3", 1021, 1022, ResultOK, 0)
	b.finish(l[2], 1023, Done)

	// A sweep takes the place of a killed owner's attempt once its lease
	// ran out.
	sw := b.enqueue(1100, ev{id: "sw1"})
	b.claim(sw[0], "w7", 1101)
	b.write(sw[0], "w7", 1102, func(s *State) { s.KindSlot = 7 }) // as a claim counts it
	b.run(sw[0], "w7", 1103, -1, "", 0)
	b.h.Processes["w7"] = Process{Exited: b.at(1104)}
	b.write(sw[0], "w1", 1101+lease, func(s *State) { s.KindSlot = 0 })
	b.handle(sw[0], "w1", 1101+lease+1)

	// Partitions under a default limit of 1 and one of their own of 2:
	// a claim sets a row held back aside, and a later one takes it once a
	// sweep took the place of a killed owner's attempt at the end of its
	// lease (its partition slot cleared); the killed attempt's row is
	// taken back after. Another row set aside is brought back READY, and
	// claimed from there.
	b.limit(ScopePartition, "", 1, 1190)
	b.limit(ScopePartition, "wide", 2, 1190)
	p := b.enqueue(1200, ev{id: "p1", partition: "acme"}, ev{id: "p2", partition: "acme"},
		ev{id: "p3", partition: "wide"}, ev{id: "p4", partition: "wide"})
	b.claimIn(p[0], "w8", 1210, 1)
	b.run(p[0], "w8", 1211, -1, "", 0)
	b.h.Processes["w8"] = Process{Exited: b.at(1212)}
	b.setAside(p[1], "w1", 1213)
	b.claimIn(p[2], "w1", 1213, 2)
	b.claimIn(p[3], "w2", 1214, 2)
	b.run(p[2], "w1", 1215, 1216, ResultOK, 0)
	b.run(p[3], "w2", 1215, 1216, ResultOK, 0)
	b.finish(p[2], 1217, Done)
	b.finish(p[3], 1217, Done)
	b.write(p[0], "w1", 1210+lease, func(s *State) { s.PartitionSlot = 0 })
	b.claimIn(p[1], "w2", 1210+lease+2, 1) // straight from WAITING, with the place freed
	b.run(p[1], "w2", 1210+lease+3, 1210+lease+4, ResultOK, 0)
	b.finish(p[1], 1210+lease+5, Done)
	b.claimIn(p[0], "w1", 1210+lease+5, 1)
	b.run(p[0], "w1", 1210+lease+6, 1210+lease+7, ResultOK, 0)
	b.finish(p[0], 1210+lease+8, Done)
	p5 := b.enqueue(1210+lease+9, ev{id: "p5", partition: "acme"}, ev{id: "p6", partition: "acme"})
	b.claimIn(p5[0], "w1", 1210+lease+10, 1)
	b.setAside(p5[1], "w1", 1210+lease+10)
	b.run(p5[0], "w1", 1210+lease+11, 1210+lease+12, ResultOK, 0)
	b.finish(p5[0], 1210+lease+13, Done)
	b.wake(p5[1], "w2", 1210+lease+14)
	b.claimIn(p5[1], "w2", 1210+lease+15, 1)
	b.run(p5[1], "w2", 1210+lease+16, 1210+lease+17, ResultOK, 0)
	b.finish(p5[1], 1210+lease+18, Done)

	// A schedule's firings.
	b.firing(1000, "w1")
	b.firing(2000, "w2")
	b.firing(4000, "w1")

	// A kind under a rate limit of 3 starts per 100ms, reached in
	// windows that no fixed bucket of 100ms holds: a claim of an event
	// that costs 2, its retry, and an expired lease taken back each take
	// starts; a claim made before the limit was declared takes none.
	rr := b.enqueue(2080, ev{id: "r0", kind: rated}, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated, cost: 2},
		ev{id: "r3", kind: rated}, ev{id: "r4", kind: rated}, ev{id: "r5", kind: rated})
	b.handle(rr[0], "w1", 2085)
	b.rate(ScopeKind, rated, 3, 100, 2090)
	b.handle(rr[1], "w1", 2110)
	b.claim(rr[2], "w2", 2150)
	b.run(rr[2], "w2", 2151, 2152, ResultRetryAfter, 60*ms)
	b.retry(rr[2], 2153, 60*ms, false)
	b.handle(rr[3], "w1", 2211)
	b.handle(rr[2], "w2", 2250)
	b.claim(rr[4], "w9", 2312)
	b.run(rr[4], "w9", 2313, -1, "", 0)
	b.h.Processes["w9"] = Process{Exited: b.at(2314)}
	b.handle(rr[4], "w1", 2312+lease)
	b.handle(rr[5], "w2", 2312+lease+1)

	// A step recorded by an attempt that then fails: the next attempt gets
	// it back and does not run it.
	sp := b.enqueue(2600, ev{id: "st"})
	b.claim(sp[0], "w1", 2610)
	b.run(sp[0], "w1", 2611, 2613, ResultError, 0).StepRan = true
	b.stepRecord(sp[0], 2612)
	b.retry(sp[0], 2614, testPolicy.Delay(1), false)
	b.claim(sp[0], "w2", 2640)
	b.run(sp[0], "w2", 2641, 2642, ResultOK, 0).StepRead = 1
	b.finish(sp[0], 2643, Done)

	b.h.Settled = b.at(5000)
	return b
}

func TestGoodHistory(t *testing.T) {
	v := Check(&good().h)
	if !v.OK() {
		t.Fatalf("%s\n%s", v, violations(v))
	}
	for _, p := range Properties {
		if v.Checked[p] == 0 {
			t.Errorf("%s checked nothing: %s", p, v)
		}
	}
	if got := v.Figures["ticks_missed"]; got != 1 {
		t.Errorf("ticks_missed = %d, want 1 (the tick at 3s)", got)
	}
	if got := v.Figures["cancelled_ran_on_ms"]; got != 30 {
		t.Errorf("cancelled_ran_on_ms = %d, want 30", got)
	}
	if got, outside := v.Figures["reruns"], v.Figures["reruns_outside_faults"]; got != 2 || outside != 0 {
		t.Errorf("reruns = %d, outside faults %d; want 2 (the stopped owners'), 0", got, outside)
	}
	if want := []LimitSeen{{Scope: ScopeKind, Name: lim, Max: 2, Claims: 6, MostLive: 2, Full: 4},
		{Scope: ScopePartition, Name: "wide", Max: 2, Claims: 2, MostLive: 2, Full: 1},
		{Scope: ScopePartition, Name: "acme", Max: 1, Claims: 5, MostLive: 1, Full: 5}}; !slices.Equal(v.Limits, want) {
		t.Errorf("limits seen %+v, want %+v", v.Limits, want)
	}
	if want := []RateSeen{{Scope: ScopeKind, Name: rated, Max: 3, Per: 100 * ms, Claims: 7, Starts: 9, Fullest: 3, Full: 4}}; !slices.Equal(v.Rates, want) {
		t.Errorf("rate limits seen %+v, want %+v", v.Rates, want)
	}
	if !strings.HasPrefix(v.String(), "history: ok owners=") {
		t.Errorf("verdict line %q", v)
	}
	t.Log(v)
}

func violations(v Verdict) string {
	var b strings.Builder
	for _, x := range v.Violations {
		b.WriteString("  " + x.String() + "\n")
	}
	return b.String()
}

// The bad histories: each breaks one promise, and the checker must say so.
var bad = []struct {
	name     string
	property string
	text     string // in a violation's text
	build    func() *builder
}{
	// owners
	{"claim while the lease runs", Owners, "two live owners", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 80, ResultOK, 0)
		b.handle(r, "w2", 50) // w1's lease runs until 110
		return b
	}},
	{"a place taken while the lease runs", Owners, "took the places of generation 1 under its limits", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.write(r, "w1", 11, func(s *State) { s.QueueSlot = 3 })
		b.write(r, "w2", 50, func(s *State) { s.QueueSlot = 0 }) // w1's lease runs until 110
		b.run(r, "w1", 12, 60, ResultOK, 0)
		b.finish(r, 61, Done)
		return b
	}},
	{"a stale owner's write accepted", Owners, "not the claimant", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.write(r, op, 20, func(s *State) { s.LeaseUntil = b.at(19) })
		b.claim(r, "w2", 30)
		b.run(r, "w2", 31, 35, ResultOK, 0)
		b.write(r, "w1", 36, func(s *State) { s.Status, s.LeaseUntil = Done, time.Time{} })
		return b
	}},
	{"a write after the lease ended", Owners, "after the lease of generation 1 ended", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0)
		b.finish(r, 200, Done) // the lease ended at 110
		return b
	}},
	{"a gap in the history", Owners, "a gap in the history", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.handle(r, "w1", 10)
		// Drop the claim from the audit.
		for i, w := range b.h.Writes {
			if w.New.Status == InProgress {
				b.h.Writes = append(b.h.Writes[:i], b.h.Writes[i+1:]...)
				break
			}
		}
		return b
	}},
	{"a run without a claim", Owners, "which no claim in the history gave", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.handle(r, "w1", 10)
		b.h.Runs = append(b.h.Runs, Run{Worker: "w2", Row: r, EventID: "e", Kind: plain, Generation: 7, Start: b.at(20), End: b.at(21), Result: ResultOK})
		return b
	}},
	{"a run in another worker than the claim's", Owners, "which w1 claimed", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w2", 11, 12, ResultOK, 0)
		b.finish(r, 13, Done)
		return b
	}},
	{"one claim run twice", Owners, "two runs of generation 1", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0)
		b.run(r, "w1", 13, 14, ResultOK, 0)
		b.finish(r, 15, Done)
		return b
	}},
	{"a claim that names another worker", Owners, "names \"w2\" as its claimant", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.write(r, "w1", 10, func(s *State) {
			s.Status, s.Generation, s.Attempt, s.Worker, s.LeaseUntil = InProgress, 1, 1, "w2", b.at(110)
		})
		b.run(r, "w2", 11, 12, ResultOK, 0)
		b.finish(r, 13, Done)
		return b
	}},
	{"a claim before the row was due", Owners, "before it was due", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultError, 0)
		b.retry(r, 13, time.Second, false)
		b.handle(r, "w1", 20)
		return b
	}},

	// key_order
	{"a follower claimed while its head runs", KeyOrder, "before an earlier row of key \"k\" finished", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		b.claim(k[0], "w1", 10)
		b.write(k[1], op, 11, func(s *State) { s.Status = Ready }) // promoted early
		b.handle(k[1], "w2", 12)
		b.run(k[0], "w1", 11, 30, ResultOK, 0)
		b.finish(k[0], 31, Done)
		return b
	}},
	{"a follower claimed behind a FAILED head", KeyOrder, "was unfinished (it ends FAILED)", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k", want: Failed}, ev{id: "k2", key: "k"})
		b.claim(k[0], "w1", 10)
		b.run(k[0], "w1", 11, 12, ResultFail, 0)
		b.finish(k[0], 13, Failed)
		b.write(k[1], op, 14, func(s *State) { s.Status = Ready }) // a FAILED head released its key
		b.handle(k[1], "w2", 20)
		return b
	}},
	{"the cancel overlap: the follower starts while the cancelled head's handler runs", KeyOrder, "was live until", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		b.claim(k[0], "w1", 10)
		b.run(k[0], "w1", 11, 60, ResultError, 0) // told at its next renewal
		b.cancel(k[0], 20)                        // releases the key at once
		b.handle(k[1], "w2", 25)                  // starts at 26, while k1's handler runs
		return b
	}},
	{"a WAITING row claimed", KeyOrder, "while WAITING", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		b.claim(k[1], "w1", 10)
		b.run(k[1], "w1", 11, 12, ResultOK, 0)
		b.finish(k[1], 13, Done)
		b.handle(k[0], "w1", 20)
		return b
	}},
	{"a WAITING row claimed by another transaction than its head's completion", KeyOrder, "while WAITING", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		b.claim(k[0], "w1", 10)
		b.run(k[0], "w1", 11, 12, ResultOK, 0)
		b.write(k[0], "w1", 13, func(s *State) { s.Status, s.LeaseUntil = Done, time.Time{} }) // passes nothing on
		b.handle(k[1], "w2", 20)                                                               // claimed from WAITING
		return b
	}},
	{"places against the real-time order of enqueues", KeyOrder, "has the earlier place", func() *builder {
		b := newBuilder()
		first := b.enqueue(0, ev{id: "k1", key: "k"})[0]
		second := b.enqueue(10, ev{id: "k2", key: "k"})[0]
		// The second enqueue was called after the first returned, yet
		// took the earlier place.
		b.cur[first], b.cur[second] = withSeq(b.cur[first], 2), withSeq(b.cur[second], 1)
		for i := range b.h.Writes {
			switch w := &b.h.Writes[i]; {
			case w.Row == first && w.New.KeySeq == 1:
				w.New.KeySeq = 2
			case w.Row == second && w.New.KeySeq == 2:
				w.New.KeySeq, w.New.Status = 1, Ready
			}
		}
		b.cur[second] = withStatus(b.cur[second], Ready)
		b.handle(second, "w1", 20)
		b.handle(first, "w1", 30)
		return b
	}},
	{"one enqueue's events out of the order given", KeyOrder, "was given after", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		for i := range b.h.Writes {
			w := &b.h.Writes[i]
			if w.Row == k[0] && w.New.KeySeq == 1 {
				w.New.KeySeq, w.New.Status = 2, Waiting
			}
			if w.Row == k[1] && w.New.KeySeq == 2 {
				w.New.KeySeq, w.New.Status = 1, Ready
			}
		}
		b.cur[k[0]], b.cur[k[1]] = withStatus(withSeq(b.cur[k[0]], 2), Waiting), withStatus(withSeq(b.cur[k[1]], 1), Ready)
		b.handle(k[1], "w1", 10)
		b.handle(k[0], "w1", 20)
		return b
	}},
	{"a keyed row never put in line", KeyOrder, "never got its place", func() *builder {
		b := newBuilder()
		b.meta[1] = Write{EventID: "k1", Kind: plain, Key: "k", Queue: "default"}
		b.next = 2
		b.put(1, Insert, op, 0, State{}, State{Status: Ready, MaxAttempts: budget, NextAttempt: b.at(0)})
		b.h.Enqueues = append(b.h.Enqueues, Enqueue{Invoked: b.at(0), Returned: b.at(1), Acked: true, Events: []Event{{EventID: "k1", Kind: plain, Key: "k"}}})
		b.handle(1, "w1", 10)
		return b
	}},

	// terminal
	{"an acknowledged enqueue lost", Terminal, "is lost", func() *builder {
		b := newBuilder()
		b.h.Enqueues = append(b.h.Enqueues, Enqueue{Invoked: b.at(0), Returned: b.at(1), Acked: true, Events: []Event{{EventID: "gone", Kind: plain}}})
		return b
	}},
	{"an event never finished", Terminal, "never finished", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.h.Settled = b.at(1000)
		return b
	}},
	{"a finished event cancelled", Terminal, "changed a finished row", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.handle(r, "w1", 10)
		b.cancel(r, 20)
		return b
	}},
	{"DONE whose handler failed", Terminal, "returned error", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultError, 0)
		b.finish(r, 13, Done)
		return b
	}},
	{"DONE at a generation not its last claim's", Terminal, "its last claim was generation 2", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0)
		b.write(r, op, 13, func(s *State) { s.LeaseUntil = b.at(12) })
		b.claim(r, "w2", 14)
		b.write(r, "w2", 15, func(s *State) { s.Status, s.Generation, s.LeaseUntil = Done, 1, time.Time{} })
		return b
	}},
	{"DONE though the payload asked to fail", Terminal, "asked for FAILED", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e", want: Failed})[0]
		b.handle(r, "w1", 10)
		return b
	}},
	{"DISCARDED by no cancel the test saw", Terminal, "no cancel call of the test returned", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.cancel(r, 10)
		b.h.Cancels = nil
		return b
	}},

	// effects
	{"a Transactional event DONE without its effect", Effects, "with 0 business effects", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		b.handle(r, "w1", 10)
		return b
	}},
	{"an effect committed apart from its completion, twice", Effects, "with 2 business effects", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0)
		b.effect(r, nil) // committed alone; w1 killed before its completion
		b.h.Processes["w1"] = Process{Exited: b.at(13)}
		b.handleTx(r, "w2", 200)
		return b
	}},
	{"a stale owner's effect", Effects, "a stale owner's effect", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0)
		b.write(r, op, 13, func(s *State) { s.LeaseUntil = b.at(12) })
		b.claim(r, "w2", 20)
		b.run(r, "w2", 21, 22, ResultOK, 0)
		w := b.finish(r, 23, Done)
		b.h.Effects = append(b.h.Effects, Effect{EventID: "t", Row: r, Generation: 1, Worker: "w1", Txid: w.Txid})
		return b
	}},
	{"an effect in another transaction than its completion", Effects, "in transaction", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		w := b.handle(r, "w1", 10)
		b.h.Effects = append(b.h.Effects, Effect{EventID: "t", Row: r, Generation: w.New.Generation, Worker: "w1", Txid: w.Txid + 100})
		return b
	}},
	{"a FAILED Transactional event with an effect", Effects, "yet a business effect", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind, want: Failed})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultFail, 0)
		b.effect(r, nil)
		b.finish(r, 13, Failed)
		return b
	}},

	// cancels
	{"a cancelled attempt's effect committed", Cancels, "committed its business effect", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 15, ResultOK, 0)
		b.effect(r, nil)
		b.cancel(r, 20)
		return b
	}},
	{"a cancelled attempt's outcome written after the cancel", Cancels, "after the cancel", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 15, ResultOK, 0)
		b.cancel(r, 12)
		b.write(r, "w1", 16, func(s *State) { s.Status = Done })
		return b
	}},
	{"a cancel that returned a generation it never wrote", Cancels, "no cancel write", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.handle(r, "w1", 10)
		b.h.Cancels = append(b.h.Cancels, Cancel{EventID: "e", Row: r, Invoked: b.at(20), Returned: b.at(21), Result: CancelOK, Generation: 2})
		return b
	}},
	{"a cancel that found an unfinished event finished", Cancels, "not finished by then", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.h.Cancels = append(b.h.Cancels, Cancel{EventID: "e", Row: r, Invoked: b.at(5), Returned: b.at(6), Result: CancelFinished})
		b.handle(r, "w1", 10)
		return b
	}},

	{"a cancelled attempt's completion accepted after the mark", Cancels, "accepted after its event was cancelled", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "t", kind: txKind})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 15, ResultOK, 0)
		b.mark(r, 12)
		b.effect(r, b.finish(r, 16, Done))
		return b
	}},
	{"a marked row claimed again", Cancels, "claimed again", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.mark(r, 12)
		b.h.Processes["w1"] = Process{Exited: b.at(13)}
		b.handle(r, "w2", 200) // the lease ended at 110
		return b
	}},
	{"a marked row ended while its attempt may run", Cancels, "the attempt may still run", func() *builder {
		b := newBuilder()
		k := b.enqueue(0, ev{id: "k1", key: "k"}, ev{id: "k2", key: "k"})
		b.claim(k[0], "w1", 10)
		b.run(k[0], "w1", 11, 60, ResultError, 0)
		b.mark(k[0], 20)
		b.stop(k[0], "w2", 21) // a claim statement, before the lease ended
		b.handle(k[1], "w2", 30)
		return b
	}},
	{"a marked row never stopped", Cancels, "never stopped", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.mark(r, 12)
		b.h.Settled = b.at(1000)
		return b
	}},

	// ticks
	{"a tick fired twice", Ticks, "fired 2 times", func() *builder {
		b := newBuilder()
		b.firing(1000, "w1")
		id := b.firing(1000, "w2")
		// Each worker named its own firing.
		m := b.meta[id]
		for i := range b.h.Writes {
			if b.h.Writes[i].Row == id {
				b.h.Writes[i].EventID = m.EventID + ":w2"
			}
		}
		return b
	}},
	{"a firing named for another time", Ticks, "whose event id names", func() *builder {
		b := newBuilder()
		id := b.firing(1000, "w1")
		for i := range b.h.Writes {
			if b.h.Writes[i].Row == id {
				b.h.Writes[i].EventID = tickNam + ":" + b.at(2000).Format(time.RFC3339)
			}
		}
		return b
	}},
	{"a firing off the grid", Ticks, "not on its grid", func() *builder {
		b := newBuilder()
		b.firing(1500, "w1")
		return b
	}},

	// snoozes
	{"a snooze that did not grow the budget", Snoozes, "grows the budget by one", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "s", kind: snoozy})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultSnooze, 5*ms)
		b.retry(r, 13, 5*ms, false)
		b.handle(r, "w1", 20)
		return b
	}},
	{"snoozes spend the retry policy's cap", Snoozes, "the snoozes spent the policy's budget", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "s", kind: snoozy})[0]
		at := 10
		for range 3 {
			b.claim(r, "w1", at)
			b.run(r, "w1", at+1, at+2, ResultSnooze, 5*ms)
			b.retry(r, at+3, 5*ms, true)
			at += 10
		}
		b.claim(r, "w1", at)
		b.run(r, "w1", at+1, at+2, ResultError, 0)
		b.finish(r, at+3, Failed) // attempt 4 of a cap of 3: but three were snoozes
		return b
	}},
	{"a budget spent by snoozes", Snoozes, "on a spent budget", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "s", kind: snoozy})[0]
		at := 10
		for range budget - 1 {
			b.claim(r, "w1", at)
			b.run(r, "w1", at+1, at+2, ResultSnooze, 5*ms)
			b.retry(r, at+3, 5*ms, false) // the snooze does not grow the budget
			at += 10
		}
		b.claim(r, "w1", at) // attempt 10 of 10; w1 dies
		b.h.Processes["w1"] = Process{Exited: b.at(at + 1)}
		// The lease expired on "the last attempt": a claim ends the row.
		b.write(r, "w2", at+lease+1, func(s *State) { s.Status, s.LeaseUntil = Failed, time.Time{} })
		return b
	}},

	// retries
	{"a RetryAfter delay ignored", Retries, "asked for 50ms", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "a"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultRetryAfter, 50*ms)
		b.retry(r, 13, testPolicy.Delay(1), false)
		b.handle(r, "w1", 30)
		return b
	}},
	{"a retry delay that counts snoozes as failures", Retries, "the policy's delay is 10ms", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "s", kind: snoozy})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultSnooze, 5*ms)
		b.retry(r, 13, 5*ms, true)
		b.claim(r, "w1", 20)
		b.run(r, "w1", 21, 22, ResultError, 0)
		b.retry(r, 23, testPolicy.Delay(2), false) // attempt 2 counted as failure 2
		b.handle(r, "w1", 50)
		return b
	}},
	{"FAILED on a retryable error with budget left", Retries, "with budget left", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "a"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultError, 0)
		b.finish(r, 13, Failed)
		return b
	}},

	// limits
	{"three attempts live under a limit of 2", Limits, "made 3 attempts live, above its limit of 2", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 2, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim}, ev{id: "l3", kind: lim})
		for i, w := range []string{"w1", "w2", "w3"} {
			b.claim(l[i], w, 10+i)
		}
		for i, w := range []string{"w1", "w2", "w3"} {
			b.run(l[i], w, 20, 21, ResultOK, 0)
			b.finish(l[i], 22+i, Done)
		}
		return b
	}},
	{"a claim a microsecond before its slot's holder ended", Limits, "made 2 attempts live, above its limit of 1", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 1, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
		b.claim(l[0], "w1", 10)
		b.run(l[0], "w1", 11, 12, ResultOK, 0)
		b.claim(l[1], "w2", 20)
		b.h.Writes[len(b.h.Writes)-1].At = b.at(20).Add(-time.Microsecond)
		b.finish(l[0], 20, Done)
		b.run(l[1], "w2", 21, 22, ResultOK, 0)
		b.finish(l[1], 23, Done)
		return b
	}},
	{"a claim before a killed holder's lease ran out", Limits, "made 2 attempts live, above its limit of 1", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 1, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
		b.claim(l[0], "w1", 10)
		b.run(l[0], "w1", 11, -1, "", 0)
		b.h.Processes["w1"] = Process{Exited: b.at(12)}
		b.handle(l[1], "w2", 10+lease-1) // the lease of l1 runs until 110
		b.handle(l[0], "w2", 10+lease+10)
		return b
	}},
	{"a claim after the lease a renewal replaced", Limits, "made 2 attempts live, above its limit of 1", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 1, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
		b.claim(l[0], "w1", 10)
		b.renew(l[0], 60) // until 160
		b.handle(l[1], "w2", 10+lease+10)
		b.run(l[0], "w1", 11, 150, ResultOK, 0)
		b.finish(l[0], 151, Done)
		return b
	}},
	{"a claim between the lease the fixture wrote and the fixture's write", Limits, "made 2 attempts live, above its limit of 1", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 1, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
		b.claim(l[0], "w1", 10)
		b.run(l[0], "w1", 11, 90, ResultError, 0)
		b.handle(l[1], "w2", 50)
		b.expire(l[0], 60) // the lease of l1 moved to the past only now
		b.handle(l[0], "w2", 70)
		return b
	}},
	{"two claims under a lowered limit of 1 beside an attempt claimed before", Limits, "made 3 attempts live, above its limit of 1 and the 1 attempts claimed before it was lowered (at most 2 allowed)", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 2, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim}, ev{id: "l3", kind: lim})
		b.claim(l[0], "w1", 10)
		b.limit(ScopeKind, lim, 1, 20)
		b.claim(l[1], "w2", 30) // beside l1, which may run outside the limit
		b.claim(l[2], "w3", 35) // a second one under the limit of 1
		for i, w := range []string{"w1", "w2", "w3"} {
			b.run(l[i], w, 36, 37, ResultOK, 0)
			b.finish(l[i], 40+i, Done)
		}
		return b
	}},
	{"a limit lowered and raised again: more live than the old limit", Limits, "made 3 attempts live, above its limit of 2 and the 1 attempts claimed before it was lowered (at most 2 allowed)", func() *builder {
		b := newBuilder()
		b.limit(ScopeKind, lim, 2, 0)
		l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim}, ev{id: "l3", kind: lim})
		b.claim(l[0], "w1", 10)
		b.limit(ScopeKind, lim, 1, 20)
		b.limit(ScopeKind, lim, 2, 25)
		b.claim(l[1], "w2", 30)
		b.claim(l[2], "w3", 35) // l1 still live: 3, above every limit set
		for i, w := range []string{"w1", "w2", "w3"} {
			b.run(l[i], w, 36, 37, ResultOK, 0)
			b.finish(l[i], 40+i, Done)
		}
		return b
	}},
	{"a queue's limit", Limits, "queue \"bulk\": the claim by w2", func() *builder {
		b := newBuilder()
		b.limit(ScopeQueue, "bulk", 1, 0)
		l := b.enqueue(5, ev{id: "q1", queue: "bulk"}, ev{id: "q2", kind: txKind, queue: "bulk"})
		b.claim(l[0], "w1", 10)
		b.claim(l[1], "w2", 11)
		b.run(l[0], "w1", 12, 13, ResultOK, 0)
		b.finish(l[0], 14, Done)
		b.run(l[1], "w2", 12, 13, ResultOK, 0)
		b.effect(l[1], b.finish(l[1], 15, Done))
		return b
	}},

	// partitions
	{"two live attempts of a partition under a default of 1", Partitions, "partition \"acme\": the claim by w2", func() *builder {
		b := newBuilder()
		b.limit(ScopePartition, "", 1, 0)
		l := b.enqueue(5, ev{id: "p1", partition: "acme"}, ev{id: "p2", partition: "acme"}, ev{id: "p3", partition: "beta"})
		b.claimIn(l[0], "w1", 10, 1)
		b.claimIn(l[2], "w3", 10, 2)
		b.claimIn(l[1], "w2", 11, 1)
		for i, w := range []string{"w1", "w2", "w3"} {
			b.run(l[i], w, 12, 13, ResultOK, 0)
			b.finish(l[i], 14+i, Done)
		}
		return b
	}},
	{"three live attempts of a partition under its own limit of 2", Partitions, "made 3 attempts live, above its limit of 2", func() *builder {
		b := newBuilder()
		b.limit(ScopePartition, "", 1, 0)
		b.limit(ScopePartition, "wide", 2, 0)
		l := b.enqueue(5, ev{id: "p1", partition: "wide"}, ev{id: "p2", partition: "wide"}, ev{id: "p3", partition: "wide"})
		for i, w := range []string{"w1", "w2", "w3"} {
			b.claimIn(l[i], w, 10+i, 1)
		}
		for i, w := range []string{"w1", "w2", "w3"} {
			b.run(l[i], w, 13, 14, ResultOK, 0)
			b.finish(l[i], 15+i, Done)
		}
		return b
	}},
	{"a row set aside left behind", Partitions, "left behind", func() *builder {
		b := newBuilder()
		b.limit(ScopePartition, "", 1, 0)
		l := b.enqueue(5, ev{id: "p1", partition: "acme"}, ev{id: "p2", partition: "acme"})
		b.claimIn(l[0], "w1", 10, 1)
		b.setAside(l[1], "w1", 10)
		b.run(l[0], "w1", 11, 12, ResultOK, 0)
		b.finish(l[0], 13, Done)
		b.h.Settled = b.at(20)
		return b
	}},
	{"a keyed row set aside", Partitions, "a keyed row is never set aside", func() *builder {
		b := newBuilder()
		b.limit(ScopePartition, "", 1, 0)
		l := b.enqueue(5, ev{id: "p1", partition: "acme"}, ev{id: "k1", key: "k", partition: "acme"})
		b.claimIn(l[0], "w1", 10, 1)
		b.setAside(l[1], "w1", 10)
		b.run(l[0], "w1", 11, 12, ResultOK, 0)
		b.finish(l[0], 13, Done)
		b.wake(l[1], "w1", 14)
		b.handle(l[1], "w1", 15)
		return b
	}},
	{"a keyless row claimed from WAITING, never set aside", Partitions, "from WAITING, never set aside", func() *builder {
		b := newBuilder()
		l := b.enqueue(5, ev{id: "p1", partition: "acme"})
		b.write(l[0], op, 6, func(s *State) { s.Status = Waiting })
		b.handle(l[0], "w1", 15)
		return b
	}},
	{"a sweep takes a partition's place while the holder's lease runs", Owners, "took the places of generation 1", func() *builder {
		b := newBuilder()
		b.limit(ScopePartition, "", 1, 0)
		l := b.enqueue(5, ev{id: "p1", partition: "acme"})
		b.claimIn(l[0], "w1", 10, 1)
		b.write(l[0], "w2", 10+lease-1, func(s *State) { s.PartitionSlot = 0 })
		b.run(l[0], "w1", 11, 12, ResultOK, 0)
		b.finish(l[0], 13, Done)
		return b
	}},

	// rates
	{"four starts in a window of 100ms that no fixed bucket holds, under a limit of 3", Rates,
		"made 4 starts in the window of 100ms that ends then, above its Max of 3", func() *builder {
			b := newBuilder()
			b.rate(ScopeKind, rated, 3, 100, 0)
			r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated}, ev{id: "r3", kind: rated}, ev{id: "r4", kind: rated})
			for i, at := range []int{10, 60, 95, 105} {
				b.handle(r[i], "w1", at)
			}
			return b
		}},
	{"an event's cost counted", Rates, "made 4 starts in the window of 100ms that ends then, above its Max of 3", func() *builder {
		b := newBuilder()
		b.rate(ScopeKind, rated, 3, 100, 0)
		r := b.enqueue(5, ev{id: "r1", kind: rated, cost: 2}, ev{id: "r2", kind: rated, cost: 2})
		b.handle(r[0], "w1", 10)
		b.handle(r[1], "w2", 50)
		return b
	}},
	{"a retry takes a start", Rates, "made 3 starts in the window of 100ms that ends then, above its Max of 2", func() *builder {
		b := newBuilder()
		b.rate(ScopeKind, rated, 2, 100, 0)
		r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated})
		b.claim(r[0], "w1", 10)
		b.run(r[0], "w1", 11, 12, ResultRetryAfter, 5*ms)
		b.retry(r[0], 13, 5*ms, false)
		b.handle(r[0], "w1", 30)
		b.handle(r[1], "w2", 40)
		return b
	}},
	{"a lease taken back takes a start", Rates, "made 3 starts in the window of 100ms that ends then, above its Max of 2", func() *builder {
		b := newBuilder()
		b.rate(ScopeKind, rated, 2, 100, 0)
		r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated})
		b.claim(r[0], "w9", 10)
		b.run(r[0], "w9", 11, -1, "", 0)
		b.h.Processes["w9"] = Process{Exited: b.at(12)}
		b.expire(r[0], 20)
		b.handle(r[0], "w1", 21)
		b.handle(r[1], "w2", 30)
		return b
	}},
	{"a partition's rate limit", Rates, "partition \"acme\": the claim by w2", func() *builder {
		b := newBuilder()
		b.rate(ScopePartition, "acme", 1, 100, 0)
		r := b.enqueue(5, ev{id: "p1", partition: "acme"}, ev{id: "p2", partition: "acme", kind: snoozy}, ev{id: "p3", partition: "other"})
		b.handle(r[0], "w1", 10)
		b.handle(r[2], "w3", 15)
		b.handle(r[1], "w2", 20)
		return b
	}},
	{"the default partition rate limit, for each partition apart", Rates, "partition \"b\": the claim by w4", func() *builder {
		b := newBuilder()
		b.rate(ScopePartition, "", 1, 100, 0)
		r := b.enqueue(5, ev{id: "a1", partition: "a"}, ev{id: "b1", partition: "b"}, ev{id: "b2", partition: "b"})
		b.handle(r[0], "w1", 10)
		b.handle(r[1], "w2", 12)
		b.handle(r[2], "w4", 30)
		return b
	}},
	{"a queue's rate limit, over kinds", Rates, "queue \"bulk\": the claim by w2", func() *builder {
		b := newBuilder()
		b.rate(ScopeQueue, "bulk", 1, 100, 0)
		r := b.enqueue(5, ev{id: "q1", queue: "bulk"}, ev{id: "q2", queue: "bulk", kind: snoozy})
		b.handle(r[0], "w1", 10)
		b.handle(r[1], "w2", 20)
		return b
	}},

	// steps
	{"a stale owner's step record", Steps, "not its claimant's (a stale owner's record)", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "st"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, -1, "", 0)
		b.expire(r, 20)
		b.claim(r, "w2", 30)
		// w1's record lands in the row w2 holds, naming w1's generation.
		b.write(r, "w1", 35, func(s *State) { s.Steps = withStep(s.Steps, "hold-1", StepRecord{Gen: s.Generation, Value: `"g1"`}) })
		b.run(r, "w2", 31, 40, ResultOK, 0)
		b.finish(r, 41, Done)
		return b
	}},
	{"a recorded step run again", Steps, "ran the step again, though its claim found it recorded by generation 1", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "st"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 13, ResultError, 0).StepRan = true
		b.stepRecord(r, 12)
		b.retry(r, 14, testPolicy.Delay(1), false)
		b.claim(r, "w2", 40)
		b.run(r, "w2", 41, 42, ResultOK, 0).StepRan = true
		b.finish(r, 43, Done)
		return b
	}},
	{"a step read that its claim did not find", Steps, "got back the step recorded by generation 1; its claim found none", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "st"})[0]
		b.claim(r, "w1", 10)
		b.run(r, "w1", 11, 12, ResultOK, 0).StepRead = 1
		b.finish(r, 13, Done)
		return b
	}},
	{"a step record by a write that is no running attempt's", Steps, "only a running attempt records a step", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "st"})[0]
		b.handle(r, "w1", 10)
		b.write(r, "w1", 20, func(s *State) { s.Steps = withStep(s.Steps, StepName, StepRecord{Gen: 1, Value: `"g1"`}) })
		return b
	}},

	// pauses
	{"a claim of a paused queue", Pauses, "while queue \"bulk\" was paused", func() *builder {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "q", queue: "bulk"})[0]
		b.h.Pauses = append(b.h.Pauses, Pause{Queue: "bulk", Paused: b.at(5), Resumed: b.at(100)})
		b.handle(r, "w1", 10)
		return b
	}},
}

func withSeq(s State, seq int64) State    { s.KeySeq = seq; return s }
func withStatus(s State, st string) State { s.Status = st; return s }

func TestBadHistories(t *testing.T) {
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(&tc.build().h)
			found := false
			for _, x := range v.Of(tc.property) {
				if strings.Contains(x.Text, tc.text) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s violation saying %q; the verdict: %s\n%s", tc.property, tc.text, v, violations(v))
				return
			}
			if !strings.Contains(v.String(), tc.property+"=") || !strings.Contains(v.String(), "violated") {
				t.Errorf("verdict line %q", v)
			}
			t.Logf("%s\n%s", v, violations(v))
		})
	}
}

// TestEveryPropertyFails keeps the bad histories honest: each property is
// seen failing at least once.
func TestEveryPropertyFails(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range bad {
		seen[tc.property] = true
	}
	for _, p := range Properties {
		if !seen[p] {
			t.Errorf("no bad history breaks %s", p)
		}
	}
}

func TestPolicyDelay(t *testing.T) {
	p := Policy{InitialInterval: 40 * ms, Multiplier: 2, MaxInterval: 200 * ms}
	for n, want := range map[int]time.Duration{1: 40 * ms, 2: 80 * ms, 3: 160 * ms, 4: 200 * ms, 50: 200 * ms} {
		if got := p.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
}

// A cancel of a row marked already, once the marked attempt's lease has
// run out (its owner killed or stopped), ends the row DISCARDED at a new
// generation, as a claim would: that is the marked attempt's stop. The
// same cancel while the lease runs is a violation.
func TestCancelEndsAMarkedRowOnceItsLeaseRanOut(t *testing.T) {
	for _, late := range []bool{true, false} {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "e"})[0]
		b.claim(r, "w1", 10)
		b.mark(r, 12)
		at := 10 + lease/2
		if late {
			at = 10 + lease + 5
		}
		b.cancel(r, at)
		b.h.Settled = b.at(10 + 2*lease)
		v := Check(&b.h)
		switch {
		case late && !v.OK():
			t.Errorf("a cancel after the lease ran out: %s\n%s", v, violations(v))
		case !late && len(v.Of(Cancels)) == 0:
			t.Errorf("a cancel that ended a marked row while its lease ran: %s; want a cancels violation", v)
		}
	}
}

// The limits property at its edges: each history is one a correct run can
// record, and must hold; with the claim moved a microsecond earlier (or
// the ambiguous setting made certain), it must fail.
func TestLimitEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder, early bool)
	}{
		{"a claim at the instant the slot's holder ended", func(b *builder, early bool) {
			b.limit(ScopeKind, lim, 1, 0)
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
			b.claim(l[0], "w1", 10)
			b.run(l[0], "w1", 11, 12, ResultOK, 0)
			b.finish(l[0], 20, Done)
			b.claim(l[1], "w2", 20)
			shift(b, early)
			b.run(l[1], "w2", 21, 22, ResultOK, 0)
			b.finish(l[1], 23, Done)
		}},
		{"a claim at the instant the holder's lease ran out", func(b *builder, early bool) {
			b.limit(ScopeQueue, "bulk", 1, 0)
			l := b.enqueue(5, ev{id: "q1", queue: "bulk"}, ev{id: "q2", queue: "bulk"})
			b.claim(l[0], "w1", 10)
			b.run(l[0], "w1", 11, -1, "", 0)
			b.h.Processes["w1"] = Process{Exited: b.at(12)}
			b.claim(l[1], "w2", 10+lease)
			shift(b, early)
			b.run(l[1], "w2", 10+lease+1, 10+lease+2, ResultOK, 0)
			b.finish(l[1], 10+lease+3, Done)
			b.handle(l[0], "w2", 10+lease+5)
		}},
		{"a claim at the instant of the expiry fixture's write", func(b *builder, early bool) {
			b.limit(ScopeKind, lim, 1, 0)
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
			b.claim(l[0], "w1", 10)
			b.run(l[0], "w1", 11, 90, ResultError, 0)
			b.expire(l[0], 50)
			b.claim(l[1], "w2", 50)
			shift(b, early)
			b.run(l[1], "w2", 51, 52, ResultOK, 0)
			b.finish(l[1], 53, Done)
			b.handle(l[0], "w2", 60)
		}},
		{"a claim at the instant a renewed lease ran out", func(b *builder, early bool) {
			b.limit(ScopeKind, lim, 1, 0)
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
			b.claim(l[0], "w1", 10)
			b.run(l[0], "w1", 11, -1, "", 0)
			// Its guard passed before the lease ran out, its write came
			// after: the lease is the renewal's.
			w := b.renew(l[0], 10+lease-1)
			w.At = b.at(10 + lease + 1)
			b.h.Processes["w1"] = Process{Exited: b.at(10 + lease + 2)}
			b.claim(l[1], "w2", 10+2*lease-1)
			shift(b, early)
			b.run(l[1], "w2", 10+2*lease, 10+2*lease+1, ResultOK, 0)
			b.finish(l[1], 10+2*lease+2, Done)
			b.handle(l[0], "w2", 10+2*lease+5)
		}},
		{"a lowered limit: the attempts claimed before run on beside the claims under it", func(b *builder, early bool) {
			b.limit(ScopeKind, lim, 3, 0)
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim}, ev{id: "l3", kind: lim},
				ev{id: "l4", kind: lim}, ev{id: "l5", kind: lim})
			for i, w := range []string{"w1", "w2", "w3"} {
				b.claim(l[i], w, 10+i)
			}
			b.limit(ScopeKind, lim, 1, 20)
			b.run(l[0], "w1", 30, 31, ResultOK, 0)
			b.finish(l[0], 40, Done)
			b.claim(l[3], "w1", 40) // beside l2 and l3, outside the limit now
			b.run(l[3], "w1", 41, 42, ResultOK, 0)
			b.finish(l[3], 50, Done)
			b.claim(l[4], "w4", 50)
			shift(b, early)
			b.run(l[4], "w4", 51, 52, ResultOK, 0)
			b.finish(l[4], 53, Done)
			for i, w := range []string{"w2", "w3"} {
				b.run(l[1+i], w, 54, 55, ResultOK, 0)
				b.finish(l[1+i], 56+i, Done)
			}
		}},
		{"a claim whose write came after a raise was called may keep it", func(b *builder, early bool) {
			b.limit(ScopeKind, lim, 1, 0)
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
			b.claim(l[0], "w1", 10)
			b.limit(ScopeKind, lim, 2, 20) // called at 20, returned at 21
			w := b.claim(l[1], "w2", 20)
			w.Stmt = b.at(19)
			if early {
				w.At = b.at(20).Add(-time.Microsecond) // its write came before the call: the limit of 1 bound it
			}
			for i, w := range []string{"w1", "w2"} {
				b.run(l[i], w, 30, 31, ResultOK, 0)
				b.finish(l[i], 40+i, Done)
			}
		}},
		{"an attempt claimed before the limit was declared holds no slot", func(b *builder, early bool) {
			l := b.enqueue(5, ev{id: "l1", kind: lim}, ev{id: "l2", kind: lim})
			b.claim(l[0], "w1", 10)
			b.limit(ScopeKind, lim, 1, 20)
			if early {
				b.h.Limits[0].Invoked, b.h.Limits[0].Returned = b.at(0), b.at(1)
			}
			b.claim(l[1], "w2", 30)
			for i, w := range []string{"w1", "w2"} {
				b.run(l[i], w, 31, 32, ResultOK, 0)
				b.finish(l[i], 40+i, Done)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b, false)
			if v := Check(&b.h); !v.OK() || v.Checked[Limits] == 0 {
				t.Errorf("%s\n%s", v, violations(v))
			}
			b = newBuilder()
			tc.build(b, true)
			v := Check(&b.h)
			if len(v.Of(Limits)) == 0 {
				t.Errorf("moved over the edge: %s; want a limits violation", v)
			}
			t.Logf("over the edge: %s", violations(v))
		})
	}
}

// TestRateEdges shows the windows' edges: each history keeps its limit,
// and breaks it when one claim is moved a microsecond earlier.
func TestRateEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder, early bool)
	}{
		{"a start a period after another is in a window of its own", func(b *builder, early bool) {
			b.rate(ScopeKind, rated, 1, 100, 0)
			r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated})
			b.handle(r[0], "w1", 10)
			b.claim(r[1], "w2", 110)
			shift(b, early)
			b.run(r[1], "w2", 111, 112, ResultOK, 0)
			b.finish(r[1], 113, Done)
		}},
		{"a claim before the limit was declared took no start", func(b *builder, early bool) {
			r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated})
			b.handle(r[0], "w1", 10)
			b.rate(ScopeKind, rated, 1, 100, 20)
			if early {
				b.h.RateLimits[0].Invoked, b.h.RateLimits[0].Returned = b.at(0), b.at(1)
			}
			b.handle(r[1], "w2", 30)
		}},
		{"a claim made while the limit was declared may have taken none", func(b *builder, early bool) {
			r := b.enqueue(5, ev{id: "r1", kind: rated}, ev{id: "r2", kind: rated})
			b.rate(ScopeKind, rated, 1, 100, 9)
			b.h.RateLimits[0].Returned = b.at(12)
			if early {
				b.h.RateLimits[0].Returned = b.at(10).Add(-time.Microsecond)
			}
			b.handle(r[0], "w1", 10)
			b.handle(r[1], "w2", 30)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b, false)
			if v := Check(&b.h); !v.OK() || v.Checked[Rates] == 0 {
				t.Errorf("%s\n%s", v, violations(v))
			}
			b = newBuilder()
			tc.build(b, true)
			v := Check(&b.h)
			if len(v.Of(Rates)) == 0 {
				t.Errorf("moved over the edge: %s; want a rates violation", v)
			}
			t.Logf("over the edge: %s", violations(v))
		})
	}
}

// shift moves the last write, a claim, a microsecond earlier when early.
func shift(b *builder, early bool) {
	if early {
		w := &b.h.Writes[len(b.h.Writes)-1]
		w.Stmt, w.At = w.Stmt.Add(-time.Microsecond), w.At.Add(-time.Microsecond)
	}
}

// A claim whose statement began while its queue was paused, and whose
// snapshot came after the resume (its write after the resume's call), is
// no violation: the claim saw the queue resumed. One written before the
// resume's call is.
func TestPauseClaimBegunBeforeResume(t *testing.T) {
	for _, c := range []struct {
		writtenAt int
		violated  bool
	}{{120, false}, {90, true}} {
		b := newBuilder()
		r := b.enqueue(0, ev{id: "q", queue: "bulk"})[0]
		b.h.Pauses = append(b.h.Pauses, Pause{Queue: "bulk", Paused: b.at(5), Resumed: b.at(100)})
		cl := b.claim(r, "w1", 80)
		cl.At = b.at(c.writtenAt)
		b.run(r, "w1", c.writtenAt+1, c.writtenAt+5, ResultOK, 0)
		b.finish(r, c.writtenAt+6, Done)
		v := Check(&b.h)
		if got := len(v.Of(Pauses)) > 0; got != c.violated {
			t.Errorf("a claim begun at 80 ms, written at %d ms, the pause from 5 to 100 ms: violated %v, want %v\n%s",
				c.writtenAt, got, c.violated, violations(v))
		}
	}
}
