/*
 * A model of leasework's ownership protocol, checked with Spin.
 *
 * Event rows and two workers. Each worker claims a row, and while it
 * believes it owns the claim its handler runs and it renews the claim;
 * the handler returns (or the worker stops it, its own deadline passed),
 * and the worker completes the row, sends it back for a retry, fails it, or
 * releases it; or it crashes (its claim is forgotten, a new incarnation
 * starts) or pauses (Spin explores every interleaving, so a worker may be
 * delayed between any two steps while the others go on). Time is the
 * "clock" process: while a row is INPROGRESS its lease may run out at any
 * moment, once the handler running under it has stopped: a worker's own
 * deadline comes before the database's (invariant 6), and a handler stops
 * when its context ends. An operator requeues a FAILED row, at most
 * REQUEUES times, and discards one, at most DISCARDS times; a "canceller"
 * cancels an unfinished row, at most CANCELS times.
 *
 * Compiled with -DKEYS, there are two rows of one key: row 0 its head,
 * READY, and row 1 WAITING behind it. Only the head is ever READY,
 * INPROGRESS or FAILED; the commit that makes the head DONE or DISCARDED
 * promotes the next row to READY (migration 4's commit trigger).
 *
 * Each statement of the store is one atomic step, as one SQL statement is:
 *   claim     due READY, or INPROGRESS with an expired lease; an expired
 *             cancel-marked row ends DISCARDED instead (and its key passes
 *             on at that commit); on the last allowed attempt an expired
 *             lease ends the row FAILED; else INPROGRESS, generation + 1,
 *             attempt + 1, a fresh lease
 *   renew, complete, retry, fail, release
 *             guarded: INPROGRESS, the owner's generation, lease not
 *             expired, and not cancel-marked
 *   stop      the owner's write after a cancel: as guarded, but asks for
 *             the mark; the row ends DISCARDED, generation + 1, and its key
 *             passes on at that commit
 *   cancel    a row no attempt holds under a live lease (READY, WAITING,
 *             FAILED, or INPROGRESS expired) ends DISCARDED at once,
 *             generation + 1; a running attempt's row is only marked: it
 *             keeps its status, lease and key until the attempt stops
 *             (stop) or its lease ends (claim)
 *   requeue   FAILED to READY, generation + 1, attempts reset
 *   discard   FAILED to DISCARDED, generation + 1
 *
 * Checked:
 *   - at most one outcome is accepted per generation (assert);
 *   - an accepted write is the current generation's (assert: a stale
 *     owner's write is never accepted);
 *   - INPROGRESS exactly when a lease is held (assert after every step
 *     that changes the status, invariant 9), and a cancel mark is never
 *     lost: a marked row leaves INPROGRESS only for DISCARDED (assert);
 *   - the attempt budget is never passed (assert);
 *   - mutual exclusion: at most one handler runs at a time, on one row
 *     and across the rows of a key (assert at each handler start), and a
 *     key's second row is claimed only after its head has finished
 *     (assert);
 *   - liveness: every row is eventually finished for good (ltl
 *     "finished"). Every step spends a bounded budget (generations,
 *     renewals, crashes, repairs, cancels), so the model has no cycles:
 *     every run ends, and this says that none ends stuck.
 * Compiled with -DBROKEN, completion leaves the generation out of its
 * guard; check.sh shows that Spin then finds a stale completion accepted.
 * Compiled with -DKEYS -DBROKEN_CANCEL, a cancel ends a running attempt's
 * row DISCARDED at once (the key passes on at that commit, while the
 * attempt's handler runs until its next renewal); check.sh shows that Spin
 * then finds two handlers of the key running at once. Compiled with -DKEYS
 * -DBROKEN_SETTLE, the claim leaves an expired cancel-marked row alone
 * instead of ending it DISCARDED; Spin then finds a run in which a dead
 * owner's cancelled row holds its key for ever (the liveness check).
 *
 * Not covered: more than two rows and more than one key, batches and their
 * lock order (the deadlock freedom of batched writes is tested against
 * PostgreSQL), a keyed row claimed by the transaction that enqueued it,
 * handler transactions (CompleteTx), handlers that ignore their context
 * (the model's mutual exclusion assumes a handler stops when told, and
 * before its lease's deadline), clocks that disagree (the model has one
 * lease flag per row; the store decides by the database's clock, and a
 * worker's own clock only makes it give up earlier), retention and
 * deletion (a DELETE of a running keyed row is refused by a trigger),
 * lost replies of writes that committed (AlreadyRecorded), the number of
 * workers beyond two, and replication: the model has one database, so a
 * failover that loses a committed claim is outside it (generations outrank
 * across a promotion by the timeline's floor, which internal/rig/failover
 * tests against real standbys).
 */

#define MAXATT    2   /* a row's max_attempts */
#define REQUEUES  1   /* operator requeues */
#define DISCARDS  1   /* operator discards */
#ifndef CANCELS
#define CANCELS   1   /* cancels (check.sh's first liveness run sets 0) */
#endif
#define RENEWS    1   /* renewals per claim: a handler ends */
#define CRASHES   1   /* crashes per worker */
#define GENS      10  /* bound of a row's generations: claims and repairs */

#ifdef KEYS
#define NROWS 2
#else
#define NROWS 1
#endif

mtype = { READY, INPROGRESS, DONE, FAILED, WAITING, DISCARDED };

mtype status[NROWS];
byte  gen[NROWS];           /* generation: only grows */
byte  attempt[NROWS];
bool  hasLease[NROWS];      /* lease_until is not NULL */
bool  leaseLive[NROWS];     /* lease_until is in the future */
bool  cancelMark[NROWS];    /* cancelled_at is set on a running row */
bool  accepted[NROWS];      /* an outcome of the row's generation was accepted */
byte  requeued = 0;
byte  discarded = 0;
byte  cancels = 0;

bool  running[2];           /* worker i's handler may be running... */
byte  runRow[2];            /* ...on this row */
byte  nrunning = 0;         /* handlers that may be running */

/* The guard of every outcome write of the claim g on row r (invariant 2),
 * and the cancel mark that turns the owner's write into the stop. */
#define OWNED(r, g) (status[r] == INPROGRESS && gen[r] == (g) && leaseLive[r])
#define WRITABLE(r, g) (OWNED(r, g) && !cancelMark[r])

/* The completion's guard; the broken variant leaves the generation out. */
#ifdef BROKEN
#define COMPLETABLE(r, g) (status[r] == INPROGRESS && leaseLive[r] && !cancelMark[r])
#else
#define COMPLETABLE(r, g) WRITABLE(r, g)
#endif

/* What the claim statement takes (claims or settles); the broken variant
 * leaves an expired cancel-marked row alone. */
#ifdef BROKEN_SETTLE
#define CLAIMABLE(r) (status[r] == READY || (status[r] == INPROGRESS && !leaseLive[r] && !cancelMark[r]))
#else
#define CLAIMABLE(r) (status[r] == READY || (status[r] == INPROGRESS && !leaseLive[r]))
#endif
#define LIVE(r) (status[r] == READY || status[r] == INPROGRESS || status[r] == FAILED)
#define FINISHED(r) (status[r] == DONE || status[r] == DISCARDED)
#define HANDLERON(r) ((running[0] && runRow[0] == r) || (running[1] && runRow[1] == r))

/* An accepted outcome of claim g on row r: it must be the current
 * generation's, and the only one of it. A new generation has none yet
 * (BUMP): generations only grow, so "one per current generation" is "one
 * per generation". SETTLE is an outcome the claim statement writes. */
#define ACCEPT(r, g) \
	assert(g == gen[r]); \
	SETTLE(r)
#define SETTLE(r) \
	assert(!accepted[r]); \
	accepted[r] = true
#define BUMP(r) \
	gen[r]++; assert(gen[r] < GENS); accepted[r] = false

/* Checks row r after every step that changes its status: invariant 9
 * (INPROGRESS exactly when a lease is held), and that a cancel mark leaves
 * INPROGRESS only for DISCARDED. ENDLEASE ends the lease of a row leaving
 * INPROGRESS, and its mark (cancelled_at stays set, as the record, but no
 * longer marks a running attempt). */
#define CHECK(r) \
	assert((status[r] == INPROGRESS) == hasLease[r] && (!leaseLive[r] || hasLease[r])); \
	assert(!cancelMark[r] || status[r] == INPROGRESS)
#define ENDLEASE(r) \
	assert(!cancelMark[r] || status[r] == DISCARDED); \
	hasLease[r] = false; leaseLive[r] = false; cancelMark[r] = false; CHECK(r)

/* The key's commit trigger, at the commit of a step that finished a row:
 * if no row of the key is live, the first waiting one becomes READY. Row 0
 * is the head: it never waits. */
#ifdef KEYS
#define PROMOTE \
	if \
	:: !LIVE(0) && status[1] == WAITING -> assert(FINISHED(0)); status[1] = READY \
	:: else \
	fi
#else
#define PROMOTE skip
#endif

/* A worker forgets its claim (locals are reset, so that an idle worker is
 * one state whatever it did before). */
#define FORGET mine = 0; r = 0; renews = 0

/* The handler of worker me returns, or is stopped. */
#define STOPHANDLER \
	if \
	:: running[me] -> running[me] = false; runRow[me] = 0; nrunning-- \
	:: else \
	fi

proctype worker(byte me)
{
	byte r;         /* the row this worker believes it owns */
	byte mine;      /* the generation it believes it owns; 0: none */
	byte renews;
	byte crashes = 0;
	bool released = false;

end_idle:  /* a valid end state: a worker waits for work */
	atomic {
#ifdef KEYS
		(CLAIMABLE(0) || CLAIMABLE(1)) ->
		if
		:: CLAIMABLE(0) -> r = 0
		:: CLAIMABLE(1) -> r = 1
		fi;
#else
		CLAIMABLE(0) -> r = 0;
#endif
		if
		:: status[r] == INPROGRESS && cancelMark[r] ->
			/* claim statement: the lease of a cancelled attempt ended */
			SETTLE(r);
			status[r] = DISCARDED; BUMP(r); ENDLEASE(r); PROMOTE;
			r = 0 /* no claim for this worker */
		:: status[r] == INPROGRESS && !cancelMark[r] && attempt[r] >= MAXATT ->
			/* claim statement: the last attempt's lease expired */
			SETTLE(r);
			status[r] = FAILED; ENDLEASE(r);
			r = 0 /* no claim for this worker */
		:: else ->
			BUMP(r); attempt[r]++;
			assert(attempt[r] <= MAXATT);
			assert(r == 0 || FINISHED(0)); /* the key's order */
			status[r] = INPROGRESS; hasLease[r] = true; leaseLive[r] = true; CHECK(r);
			mine = gen[r]; renews = 0;
			/* the handler starts: the only one running, per key */
			running[me] = true; runRow[me] = r; nrunning++;
			assert(nrunning <= 1)
		fi
	}
	if
	:: mine == 0 -> goto end_idle
	:: else
	fi;
owned:  /* the handler runs */
	if
	:: renews < RENEWS ->   /* renew */
		atomic {
			renews++;
			if
			:: WRITABLE(r, mine) -> leaseLive[r] = true
			:: OWNED(r, mine) && cancelMark[r] -> skip /* rejected as cancelled: the handler is told to stop */
			:: else -> STOPHANDLER; FORGET             /* lost: the handler is told, the claim forgotten */
			fi
		};
		if :: mine == 0 -> goto end_idle :: else -> goto owned fi
	:: atomic { STOPHANDLER }  /* the handler returns, or its deadline (the worker's clock) stops it */
	:: crashes < CRASHES -> atomic { STOPHANDLER; crashes++; FORGET }; goto end_idle  /* crash: a new incarnation */
	fi;
	/* the handler has returned: one outcome write, or a crash */
	atomic {
		if
		:: OWNED(r, mine) && cancelMark[r] ->
			/* the write is rejected as cancelled; the stop it writes then is
			 * the owner's acknowledgement, and passes the key on */
			ACCEPT(r, mine); status[r] = DISCARDED; BUMP(r); ENDLEASE(r); PROMOTE
		:: COMPLETABLE(r, mine) -> ACCEPT(r, mine); status[r] = DONE; ENDLEASE(r); PROMOTE
		:: WRITABLE(r, mine) -> ACCEPT(r, mine);  /* retry */
			if :: attempt[r] >= MAXATT -> status[r] = FAILED :: else -> status[r] = READY fi;
			ENDLEASE(r)
		:: WRITABLE(r, mine) -> ACCEPT(r, mine); status[r] = FAILED; ENDLEASE(r)
		:: WRITABLE(r, mine) && !released -> /* release at shutdown: gives the attempt back */
			ACCEPT(r, mine); status[r] = READY; attempt[r]--; ENDLEASE(r); released = true
		:: !OWNED(r, mine) -> skip  /* its write rejected: lease lost */
		:: crashes < CRASHES -> crashes++
		fi;
		FORGET
	};
	goto end_idle
}

/* Time: a running lease may run out at any moment once its handler has
 * stopped. */
proctype clock()
{
end:	do
	:: atomic { status[0] == INPROGRESS && leaseLive[0] && !HANDLERON(0) -> leaseLive[0] = false }
#ifdef KEYS
	:: atomic { status[1] == INPROGRESS && leaseLive[1] && !HANDLERON(1) -> leaseLive[1] = false }
#endif
	od
}

/* The operator's repair paths: requeue and discard a FAILED row. */
#ifdef KEYS
#define ANYFAILED (status[0] == FAILED || status[1] == FAILED)
#define ANYUNFINISHED (!FINISHED(0) || !FINISHED(1))
#else
#define ANYFAILED (status[0] == FAILED)
#define ANYUNFINISHED (!FINISHED(0))
#endif

proctype operator()
{
	byte r;
end:	do
	:: atomic { requeued < REQUEUES && ANYFAILED ->
		if :: status[0] == FAILED -> r = 0
#ifdef KEYS
		   :: status[1] == FAILED -> r = 1
#endif
		fi;
		BUMP(r);
		status[r] = READY; attempt[r] = 0; requeued++; CHECK(r) }
	:: atomic { discarded < DISCARDS && ANYFAILED ->
		if :: status[0] == FAILED -> r = 0
#ifdef KEYS
		   :: status[1] == FAILED -> r = 1
#endif
		fi;
		BUMP(r);
		status[r] = DISCARDED; discarded++; CHECK(r); PROMOTE }
	od
}

/* Store.Cancel, of any unfinished row (READY, WAITING, INPROGRESS or
 * FAILED). */
proctype canceller()
{
	byte r;
end:	do
	:: atomic { cancels < CANCELS && ANYUNFINISHED ->
		if :: !FINISHED(0) -> r = 0
#ifdef KEYS
		   :: !FINISHED(1) -> r = 1
#endif
		fi;
		cancels++;
		if
		:: status[r] == INPROGRESS && leaseLive[r] ->
#ifdef BROKEN_CANCEL
			/* the key passes on now, while the attempt's handler runs */
			BUMP(r); status[r] = DISCARDED; ENDLEASE(r); PROMOTE
#else
			cancelMark[r] = true  /* the attempt keeps the row, and the key, until it stops */
#endif
		:: else ->
			BUMP(r); status[r] = DISCARDED; ENDLEASE(r); PROMOTE
		fi }
	od
}

init {
	atomic {
		status[0] = READY;
#ifdef KEYS
		status[1] = WAITING;
#endif
		run worker(0); run worker(1); run clock(); run operator(); run canceller()
	}
}

/* Every row ends finished for good: DONE, DISCARDED, or FAILED once the
 * operator has no repair left. */
#define SETTLED(r) (FINISHED(r) || (status[r] == FAILED && requeued >= REQUEUES && discarded >= DISCARDS))
#ifdef KEYS
ltl finished { <> [] (SETTLED(0) && SETTLED(1)) }
#else
ltl finished { <> [] SETTLED(0) }
#endif
