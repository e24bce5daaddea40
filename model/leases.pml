/*
 * A model of leasework's ownership protocol, checked with Spin.
 *
 * One event row and two workers. Each worker claims the row, and while it
 * believes it owns the claim it renews it, completes it, sends it back for
 * a retry, fails it, or releases it; or it crashes (its claim is forgotten,
 * a new incarnation starts) or pauses (Spin explores every interleaving, so
 * a worker may be delayed between any two steps while the others go on).
 * Time is the "clock" process: while the row is INPROGRESS its lease may run
 * out at any moment. An operator requeues a FAILED row, at most REQUEUES
 * times.
 *
 * Each statement of the store is one atomic step, as one SQL statement is:
 *   claim     due READY, or INPROGRESS with an expired lease; on the last
 *             allowed attempt an expired lease ends the row FAILED instead;
 *             else INPROGRESS, generation + 1, attempt + 1, a fresh lease
 *   renew, complete, retry, fail, release
 *             guarded: INPROGRESS, the owner's generation, lease not expired
 *   requeue   FAILED to READY, generation + 1, attempts reset
 *
 * Checked:
 *   - at most one outcome is accepted per generation (assert);
 *   - an accepted write is the current generation's (assert: a stale
 *     owner's write is never accepted);
 *   - INPROGRESS exactly when a lease is held (assert after every step
 *     that changes the status, invariant 9);
 *   - the attempt budget is never passed (assert);
 *   - liveness: with weak fairness, the row is eventually finished for good
 *     (ltl "finished"), while the workers keep running.
 * Compiled with -DBROKEN, completion leaves the generation out of its
 * guard; check.sh shows that Spin then finds a stale completion accepted.
 *
 * Not covered: several rows, batches and their lock order (the deadlock
 * freedom of batched writes is tested against PostgreSQL), keys and their
 * order, handler transactions (CompleteTx), clocks that disagree (the model
 * has one lease flag; the store decides by the database's clock, and a
 * worker's own clock only makes it give up earlier), retention and
 * deletion, lost replies of writes that committed (AlreadyRecorded), the
 * number of workers beyond two, and replication: the model has one
 * database, so a failover that loses a committed claim is outside it
 * (generations outrank across a promotion by the timeline's floor, which
 * internal/failover tests against real standbys).
 */

#define MAXATT    2   /* the row's max_attempts */
#define REQUEUES  1   /* operator requeues */
#define RENEWS    1   /* renewals per claim: a handler ends */
#define CRASHES   1   /* crashes per worker */
#define GENS      8   /* bound of generations: claims and requeues */

mtype = { READY, INPROGRESS, DONE, FAILED };

mtype status = READY;
byte  gen = 0;           /* generation: only grows */
byte  attempt = 0;
bool  hasLease = false;  /* lease_until is not NULL */
bool  leaseLive = false; /* lease_until is in the future */
byte  accepted[GENS];    /* outcomes accepted per generation */
byte  requeued = 0;

/* The guard of every outcome write, invariant 2. */
#define OWNED(g) (status == INPROGRESS && gen == (g) && leaseLive)

/* The completion's guard; the broken variant leaves the generation out. */
#ifdef BROKEN
#define COMPLETABLE(g) (status == INPROGRESS && leaseLive)
#else
#define COMPLETABLE(g) OWNED(g)
#endif

/* An accepted outcome of claim g: it must be the current generation's,
 * and the only one of it. */
#define ACCEPT(g) \
	assert(g == gen); \
	accepted[gen]++; \
	assert(accepted[gen] <= 1)

/* Ends the row's lease (an outcome leaves INPROGRESS), and checks
 * invariant 9: INPROGRESS exactly when a lease is held. Every step that
 * changes the status ends with CHECK9. */
#define CHECK9 assert((status == INPROGRESS) == hasLease && (!leaseLive || hasLease))
#define ENDLEASE hasLease = false; leaseLive = false; CHECK9

proctype worker()
{
	byte mine;      /* the generation this worker believes it owns; 0: none */
	byte renews;
	byte crashes = 0;
	bool released = false;

end_idle:  /* a valid end state: a worker waits for work */
	atomic {
		(status == READY || (status == INPROGRESS && !leaseLive)) ->
		if
		:: status == INPROGRESS && attempt >= MAXATT ->
			/* claim statement: the last attempt's lease expired */
			accepted[gen]++; assert(accepted[gen] <= 1);
			status = FAILED; ENDLEASE
			/* no claim for this worker */
		:: else ->
			gen++; attempt++;
			assert(gen < GENS && attempt <= MAXATT);
			status = INPROGRESS; hasLease = true; leaseLive = true; CHECK9;
			mine = gen; renews = 0
		fi
	}
	if
	:: mine == 0 -> goto end_idle
	:: else
	fi;
owned:
	if
	:: renews < RENEWS ->   /* renew */
		atomic { if :: OWNED(mine) -> leaseLive = true :: else -> mine = 0 fi; renews++ };
		if :: mine == 0 -> goto end_idle :: else -> goto owned fi
	:: atomic { COMPLETABLE(mine) -> ACCEPT(mine); status = DONE; ENDLEASE }; mine = 0; goto end_idle
	:: atomic { OWNED(mine) -> ACCEPT(mine);
		if :: attempt >= MAXATT -> status = FAILED :: else -> status = READY fi;
		ENDLEASE }; mine = 0; goto end_idle
	:: atomic { OWNED(mine) -> ACCEPT(mine); status = FAILED; ENDLEASE }; mine = 0; goto end_idle
	:: !released -> /* release at shutdown: gives the attempt back */
		atomic { if :: OWNED(mine) -> ACCEPT(mine); status = READY; attempt--; ENDLEASE :: else fi };
		released = true; mine = 0; goto end_idle
	:: atomic { !OWNED(mine) -> mine = 0 }; goto end_idle   /* its write rejected: lease lost */
	:: crashes < CRASHES -> crashes++; mine = 0; goto end_idle  /* crash: a new incarnation */
	fi
}

/* Time: a running lease may run out at any moment. */
proctype clock()
{
end:	do
	:: atomic { status == INPROGRESS && leaseLive -> leaseLive = false }
	od
}

/* The operator's repair path. */
proctype operator()
{
end:	do
	:: atomic { status == FAILED && requeued < REQUEUES ->
		gen++; assert(gen < GENS);
		status = READY; attempt = 0; requeued++; CHECK9 }
	:: requeued >= REQUEUES -> break
	od
}

init {
	atomic { run worker(); run worker(); run clock(); run operator() }
}

ltl finished { <> [] (status == DONE || (status == FAILED && requeued >= REQUEUES)) }
