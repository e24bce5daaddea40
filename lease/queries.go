package lease

import (
	"fmt"
	"strings"

	"github.com/leasework/leasework"
)

// The statements, one copy each. {{table}} and friends are replaced by quoted
// identifiers when a Store is made; every value is a bound parameter.
// Durations are bound as microseconds.

// guard is invariant 2: the full ownership check of every outcome write. The
// joined row set r carries the claim's id and generation. The single-row
// progress write uses it as is; the batched writes use batchGuard.
const guard = `o.id = r.id AND ` + inProgress + ` AND o.generation = r.generation
  AND o.lease_until > clock_timestamp() AND ` + notCancelled

// inProgress is the guard's status check. Its explicit collation keeps the
// planner from proving with it the predicate of the partial lease index
// (status = 'INPROGRESS' under the default collation), which would let a
// write read every in-flight row's entry of that index and combine it with
// the primary key (a BitmapAnd) instead of reading its own rows only
// (invariant 11). Equality of text is the same under every deterministic
// collation, so the check is the same.
const inProgress = `o.status = 'INPROGRESS' COLLATE "C"`

// Every batched guarded write locks its rows first, in id order, and writes
// only the rows it locked. Two batches over overlapping rows given in
// different orders then wait for each other in one order and never
// deadlock: updating through a join with the given array would lock rows in
// the array's order. The rows are named by the id array ($1) and read
// through the primary key, whatever the statistics or the cached plan
// (invariant 11); the plan is LockRows over an ordered primary-key scan, or
// over a Sort by id.
const lockedCTE = lockStep + `
)`

// markingLockedCTE is lockedCTE for a completion that passes on itself the
// keys of the rows it finishes (passingKeysOn, takingTurns): it marks the
// transaction (leasework.keys_passed) as it locks the rows, which is
// before the statement writes any of them (the guard reads every locked
// id first), so that the release triggers, whose condition reads the
// mark as each row is written (migration 16), queue nothing for them.
const markingLockedCTE = `locked AS (
    SELECT o.id, set_config('leasework.keys_passed', 'on', true), set_config('leasework.slots_passed', 'on', true)` + lockRows + `
)`

// givingPlacesBack returns the CTEs of a completion that gives back
// itself the places its rows held under concurrency limits (migration
// 17), after done, less those it handed on (handedOn: placesHandedOn, or
// empty for a completion that hands none on): one release per slot, of the slots still there, and one
// notification per kind of those rows, that idle workers claim what they
// free. The lock step (markingLockedCTE) marks the transaction
// (leasework.slots_passed) before any row is written, so that the release
// trigger, whose condition reads the mark as each row is written, skips
// them. woken is one row, read by the statement's last SELECT, so that it
// runs.
func givingPlacesBack(handedOn string) string {
	return `, released AS (
    INSERT INTO {{schema}}.{{name "limit_releases"}} (key, n)
    SELECT u.key, sum(u.n) FROM (SELECT kind_slot AS key, 1 AS n FROM done WHERE kind_slot IS NOT NULL
                                 UNION ALL
                                 SELECT queue_slot, 1 FROM done WHERE queue_slot IS NOT NULL` + handedOn + `) AS u
    WHERE u.key = ANY (ARRAY(SELECT s.key FROM {{schema}}.{{name "limit_slots"}} AS s
                             WHERE s.key = ANY (ARRAY(SELECT kind_slot FROM done WHERE kind_slot IS NOT NULL
                                                      UNION ALL
                                                      SELECT queue_slot FROM done WHERE queue_slot IS NOT NULL))))
    GROUP BY u.key
    HAVING sum(u.n) > 0
), part_released AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT d.partition_slot, count(*) FROM done AS d WHERE d.partition_slot IS NOT NULL
    GROUP BY d.partition_slot
), woken AS MATERIALIZED (
    SELECT count(pg_notify({{channel}}, k.kind)) AS n
    FROM (SELECT DISTINCT kind FROM done WHERE kind_slot IS NOT NULL OR queue_slot IS NOT NULL OR partition_slot IS NOT NULL) AS k
)`
}

// doneColumns are the columns a completion's step returns, after its own,
// for the CTEs that follow it.
const doneColumns = `, o.key, o.kind, o.queue, o.kind_slot, o.queue_slot, o.partition_slot`

// lockStep is lockedCTE without its end, so that renewSQL can add SKIP
// LOCKED.
const lockStep = `locked AS (
    SELECT o.id` + lockRows

// lockRows is the lock step after its select list.
const lockRows = ` FROM {{table}} AS o
    WHERE o.id = ANY ($1::bigint[]) AND ` + inProgress + `
    ORDER BY o.id
    FOR UPDATE`

// batchGuard is guard for a batch, restricted to the rows locked by
// lockedCTE. Each claim's values come from $2, a JSON object from the id
// (as text) to an array [generation, the write's own values...], looked up
// per row by key: a binary search in the object. Joining the rows with
// unnest($1, $2) instead costs the square of the batch under a generic
// plan, which estimates ten rows for each side and picks a nested loop over
// the function's output (999,000 rows removed by the join filter for a
// batch of 1,000, 165 ms instead of 13).
const batchGuard = `o.id = ANY (ARRAY(SELECT id FROM locked)) AND ` + ownedPerRow

// ownedPerRow is the rest of the guard for a row o of a batch.
const ownedPerRow = inProgress + `
  AND o.generation = (` + rowValue + ` ->> 0)::bigint
  AND o.lease_until > clock_timestamp() AND ` + notCancelled

// nextGeneration is the generation a claim or a repair gives row o: one
// more than its own, and never less than the floor of the server's
// timeline, (timeline - 1) * 2^32. A promoted standby writes on a new
// timeline. Without the floor, a claim committed on the old primary and
// lost with it (asynchronous replication) could be handed out again, at the
// same generation, by the new primary to a second owner, and the first
// owner's writes would match the guard. With it, every generation given
// after a promotion outranks every generation given before it. A server
// never promoted is on timeline 1: its floor is 0 and generations count
// 1, 2, 3. The timeline is the first eight hex digits of the name of the
// WAL file being written; the subquery is evaluated once per statement.
const nextGeneration = `GREATEST(o.generation + 1, ` + timelineFloor + `)`

// timelineFloor is the floor of nextGeneration.
const timelineFloor = `(SELECT
    (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 32)`

// rowValue is the claim's entry of $2; (rowValue ->> 1) is its first value
// after the generation.
const rowValue = `($2::jsonb -> o.id::text)`

const claimSQL = `
WITH paused AS (
    -- A paused queue gives nothing: one primary-key probe.
    SELECT EXISTS (SELECT 1 FROM {{schema}}.{{name "queues"}} WHERE queue = $5) AS yes
), ` + slotsCTEs + `, ` + rateCTEs + `, exhausted AS (
    -- Invariant 5: a lease that expired on the last allowed attempt ends the
    -- row in FAILED instead of granting another attempt. The exhausted
    -- index holds the leases on their last attempt only: the other expired
    -- leases (all those of a paused queue) are not read here. From the
    -- caller's floor for expired leases ($7), as expired below: whichever
    -- of the two lease indexes the planner reads, the range is bounded.
    UPDATE {{table}} AS o
    SET status = 'FAILED', lease_until = NULL,
        finished_at = statement_timestamp(), updated_at = statement_timestamp(),
        last_error = format('lease expired on attempt %s of %s', o.attempt, o.max_attempts)
    WHERE o.id IN (
        SELECT id FROM {{table}}
        WHERE queue = $5 AND status = 'INPROGRESS' AND lease_until <= statement_timestamp()
          AND attempt >= max_attempts AND cancelled_at IS NULL
          AND lease_until >= COALESCE(timestamptz 'epoch'
              + NULLIF($7::bigint, 0) * interval '1 microsecond', '-infinity')
        ORDER BY lease_until
        LIMIT 100
        FOR UPDATE SKIP LOCKED)
    RETURNING o.id
), stopped AS (
    -- Invariant 16: a row cancelled while an attempt ran it, whose owner
    -- never wrote again (dead, paused), ends DISCARDED once that lease has
    -- ended, instead of being claimed again; the key's commit trigger
    -- passes its key on at this commit. Any queue's: a cancel is not work
    -- a worker chooses. It reads the index of such rows, few. One keyed
    -- row at most: a transaction that finishes rows of several keys gives
    -- way to an enqueue of one of them (migration 4), which would fail the
    -- whole claim; the next claim, woken by the promotion, takes the next.
    -- Only a claim without a floor for expired leases ($7 = 0: a sweep)
    -- reads it: the rows have no queue to bound the range by, and with
    -- the horizon pinned the planner may take the queue's lease index,
    -- every dead entry of it, for the few rows of the stopping index.
    UPDATE {{table}} AS o
    SET status = 'DISCARDED', generation = ` + nextGeneration + `, lease_until = NULL,
        finished_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE o.id = ANY (ARRAY(
        SELECT u.id FROM (
            SELECT id FROM {{table}}
            WHERE status = 'INPROGRESS' AND cancelled_at IS NOT NULL AND lease_until <= statement_timestamp()
              AND key IS NULL AND $7::bigint = 0
            ORDER BY lease_until
            LIMIT 100
            FOR UPDATE SKIP LOCKED) AS u
        UNION ALL
        SELECT k.id FROM (
            SELECT id FROM {{table}}
            WHERE status = 'INPROGRESS' AND cancelled_at IS NOT NULL AND lease_until <= statement_timestamp()
              AND key IS NOT NULL AND $7::bigint = 0
            ORDER BY lease_until
            LIMIT 1
            FOR UPDATE SKIP LOCKED) AS k))
    RETURNING o.id
), expired AS (
    SELECT id, kind, generation, lease_until, kind_slot, queue_slot, key, partition_key, partition_slot, cost FROM {{table}}
    WHERE queue = $5 AND status = 'INPROGRESS' AND lease_until <= statement_timestamp()
      AND attempt < max_attempts AND cancelled_at IS NULL
      AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
      AND NOT (SELECT yes FROM paused)
      -- The caller's floor for expired leases ($7, microseconds from the
      -- epoch; 0: from the oldest), a bound of the index range.
      AND lease_until >= COALESCE(timestamptz 'epoch'
          + NULLIF($7::bigint, 0) * interval '1 microsecond', '-infinity')
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), ` + limitsCTEs + `, ` + readyCTEs + `, aside AS (
    -- The rows set aside by a full partition (migration 19) of the
    -- partitions of the due rows found and of those with places given
    -- back or whose rate limit has room again (up to 64 of each), of this
    -- queue and kinds, in the
    -- claim's order, as many as the partition has room for in this
    -- claim's snapshot (its slot unlocked, with the releases it sees): a
    -- partition with room takes them before its rows still READY, which
    -- are newer, so that rows set aside are not passed over for good by a
    -- partition that keeps getting new ones. Read through the index of
    -- rows set aside, by partition: a partition without any (most of
    -- those of the due rows found) costs one probe of it, and its room is
    -- not counted; with no row set aside at all, one probe in all.
    SELECT a.id, a.kind, a.generation, a.priority AS level, a.next_attempt_at, a.partition_key, a.cost
    FROM (SELECT r.partition_key FROM ready AS r
          WHERE r.partition_key IS NOT NULL AND r.key IS NULL AND ` + anyPartitionLimit + `
            -- In the order of the index of rows set aside, so that it is
            -- read, one entry, whatever the statistics say.
            AND ` + anySetAside + `
          UNION
          SELECT s.partition FROM {{schema}}.{{name "partition_slots"}} AS s
          WHERE s.id = ANY (ARRAY((SELECT DISTINCT r.slot FROM {{schema}}.{{name "partition_releases"}} AS r LIMIT 64)
                                  UNION ALL
                                  -- Partitions whose rate limit has room
                                  -- again (migration 24): due timers.
                                  (SELECT t.slot FROM {{schema}}.{{name "partition_timers"}} AS t
                                   WHERE t.at <= statement_timestamp() ORDER BY t.at LIMIT 64)))
            AND NOT (SELECT yes FROM paused) AND ` + anySetAside + `) AS d
    CROSS JOIN LATERAL (
        SELECT true FROM {{table}} AS w
        WHERE w.partition_key = d.partition_key AND w.status = 'WAITING' AND w.key IS NULL
        LIMIT 1) AS w
    CROSS JOIN LATERAL (
        SELECT COALESCE(
            (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = d.partition_key),
            (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = '')) AS cap,
            (SELECT s FROM {{schema}}.{{name "partition_slots"}} AS s WHERE s.partition = d.partition_key) AS s
        OFFSET 0) AS c
    LEFT JOIN LATERAL (
        -- The partition's rate limit (migration 24): its own, else the
        -- default.
        SELECT l.max_starts, l.period_us * interval '1 microsecond' AS period
        FROM {{schema}}.{{name "partition_rates"}} AS l
        WHERE l.partition IN (d.partition_key, '') AND ` + anyPartitionRate + `
        ORDER BY l.partition = ''
        LIMIT 1) AS rl ON true
    CROSS JOIN LATERAL (
        -- Room under both limits: none under neither (wake_partitions
        -- brings such rows back).
        SELECT CASE WHEN c.cap IS NULL AND rl.max_starts IS NULL THEN 0
                    ELSE GREATEST(LEAST(
                        COALESCE(c.cap - COALESCE((c.s).used - COALESCE((SELECT sum(r.n) FROM {{schema}}.{{name "partition_releases"}} AS r
                                                                          WHERE r.slot = (c.s).id), 0), 0), 2147483647),
                        COALESCE(rl.max_starts - (SELECT count(*) FROM unnest((c.s).starts) AS t
                                                  WHERE t > statement_timestamp() - rl.period), 2147483647)), 0) END AS room
        OFFSET 0) AS x
    CROSS JOIN LATERAL (
        SELECT e.id, e.kind, e.generation, e.priority, e.next_attempt_at, e.partition_key, e.cost FROM {{table}} AS e
        WHERE e.partition_key = d.partition_key AND e.status = 'WAITING' AND e.key IS NULL
          AND e.queue = $5
          AND (cardinality($2::text[]) = 0 OR e.kind = ANY($2::text[]))
          AND e.kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                   UNION ALL
                                   SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
          -- Not one that costs more than its partition's rate limit
          -- allows in a window: it never starts under it.
          AND e.cost <= COALESCE(rl.max_starts, e.cost)
        ORDER BY e.priority, e.next_attempt_at, e.id
        LIMIT x.room
        FOR UPDATE SKIP LOCKED) AS a
), ` + admitCTEs + `
)
-- The rows to update are named by an array, not joined: a join's size
-- estimate (LIMIT minus a subquery is unknown to the planner) can turn it
-- into a hash join over the whole table; an array of ids is always a
-- primary-key index scan.
UPDATE {{table}} AS o
SET status = 'INPROGRESS',
    generation = ` + nextGeneration + `,
    attempt = o.attempt + 1,
    lease_until = statement_timestamp() + $3 * interval '1 microsecond',
    worker = NULLIF($4, ''),
    kind_slot = CASE WHEN (SELECT yes FROM place_fast) THEN ` + placeOfKind + `
                     ELSE ((SELECT m FROM slot_map) -> o.id::text ->> 0)::bigint END,
    queue_slot = CASE WHEN (SELECT yes FROM place_fast) THEN ` + placeOfQueue + `
                      ELSE ((SELECT m FROM slot_map) -> o.id::text ->> 1)::bigint END,
    partition_slot = CASE WHEN (SELECT yes FROM part_fast) THEN ((SELECT m FROM part_of) -> o.partition_key ->> 1)::bigint
                          ELSE ((SELECT m FROM slot_map) -> o.id::text ->> 2)::bigint END,
    updated_at = statement_timestamp()
WHERE o.id = ANY (ARRAY(SELECT id FROM chosen))
RETURNING o.id, o.event_id, o.kind, COALESCE(o.key, ''), o.payload, o.generation,
    o.attempt, o.max_attempts, o.lease_until, o.id = ANY (ARRAY(SELECT id FROM expired)),
    o.progress, COALESCE(o.last_error, ''), o.queue, o.priority, o.next_attempt_at, COALESCE(o.metadata::text, ''),
    o.snoozes, (SELECT yes FROM held_back) AND (SELECT yes FROM held_whole) = 1, (SELECT yes FROM policy),
    COALESCE(o.steps::text, '')`

// placeOfKind and placeOfQueue are the slots of row o under its kind's
// limit and its queue's when place_fast places the rows: the slot of the
// range that holds o's rank under the limit, found with the limit's code
// (kindCode, queueCode: its index in place_needs times 2^40). NULL under
// no such limit.
const (
	placeOfKind = `(SELECT slots FROM place_fast)[width_bucket(` + kindCode + ` + width_bucket(` + kindCode + ` + o.id, (SELECT rows FROM place_fast))
                        - width_bucket(` + kindCode + `, (SELECT rows FROM place_fast)), (SELECT starts FROM place_fast))]`
	placeOfQueue = `(SELECT slots FROM place_fast)[width_bucket(` + queueCode + ` + width_bucket(` + queueCode + ` + o.id, (SELECT rows FROM place_fast))
                        - width_bucket(` + queueCode + `, (SELECT rows FROM place_fast)), (SELECT starts FROM place_fast))]`
	kindCode  = `(((SELECT kinds FROM place_fast) ->> o.kind)::bigint * 1099511627776)`
	queueCode = `((SELECT queue FROM place_fast) * 1099511627776)`
)

// claimPlainSQL is claimSQL for a queue neither fair nor aging (most):
// without the reads of fair scheduling and aging, which a claim of such a
// queue would plan and probe for nothing.
var claimPlainSQL = func() string {
	plain := strings.Replace(claimSQL, readyCTEs, readyPlainCTEs, 1)
	plain = strings.Replace(plain, ", "+fairTakingCTEs, "", 1)
	if strings.Contains(plain, "fair_read") {
		panic("lease: the plain claim statement still reads fair scheduling")
	}
	return plain
}()

// slotsCTEs are the claim's reads of the concurrency limits it keeps
// (migration 17) before it reads any row: the limits of its queue and of
// the kinds it claims (limited), and the slots it takes room from
// (picked, then open), each locked, SKIP LOCKED, so that no two claims count in one slot at
// once and none waits for another; the releases of those slots it counts
// now (returned); and each slot's room (rooms): its share, less the
// attempts counted in it, plus those releases. The slot's count is read
// under its lock, as last committed; a release committed after this
// statement's snapshot is left to a later claim. With no limit declared
// for the claim's queue or kinds, nothing but the limits' primary key is
// read.
const slotsCTEs = `limited AS (
    -- Each limit with the range of its slots' keys, and the slot from
    -- which this claim looks for room: one drawn from the worker's name
    -- (at random without one), so that the claims of many workers do not
    -- all lock the same slots, and a worker tends to find again the room
    -- its own attempts gave back.
    SELECT l.scope, l.name, l.id, l.id::bigint * 100000 AS first, l.id::bigint * 100000 + ` + limitSlots + ` AS past,
        CASE WHEN $4 = '' THEN floor(random() * ` + limitSlots + `)::integer
             ELSE mod(abs(hashtext($4)::bigint), ` + limitSlots + `)::integer END AS start
    FROM {{schema}}.{{name "limits"}} AS l
    WHERE (l.scope = 'queue' AND l.name = $5)
       OR (l.scope = 'kind' AND (cardinality($2::text[]) = 0 OR l.name = ANY ($2::text[])))
), picked AS (
    -- The slots to lock: from the one drawn on, those with room in this
    -- claim's snapshot (the releases it sees counted), until they hold
    -- its Limit. Read unlocked, the limit's slots through their primary
    -- key, and the releases of each through theirs.
    SELECT p.key FROM (
        SELECT s.key, sum(x.room) OVER (PARTITION BY l.id ORDER BY (s.slot - l.start + ` + limitSlots + `) % ` + limitSlots + `) - x.room AS before
        FROM limited AS l
        JOIN {{schema}}.{{name "limit_slots"}} AS s ON s.key >= l.first AND s.key < l.past
        CROSS JOIN LATERAL (SELECT s.cap - s.used + COALESCE((
            SELECT sum(r.n) FROM {{schema}}.{{name "limit_releases"}} AS r WHERE r.key = s.key), 0) AS room) AS x
        WHERE x.room > 0) AS p
    WHERE p.before < $1
), open AS (
    -- The slots picked, locked, with room (or releases to count) still:
    -- their count as last committed.
    SELECT l.scope, l.name, o.key, o.cap, o.used
    FROM (SELECT s.key, s.cap, s.used FROM {{schema}}.{{name "limit_slots"}} AS s
          WHERE s.key = ANY (ARRAY(SELECT key FROM picked))
            AND (s.used < s.cap OR ` + hasReleases + `)
          ORDER BY s.key
          FOR UPDATE SKIP LOCKED) AS o
    JOIN limited AS l ON o.key >= l.first AND o.key < l.past
), returned AS (
    -- The places given back in the slots locked, counted now: named by
    -- the slots' keys, a range of the releases' primary key each.
    DELETE FROM {{schema}}.{{name "limit_releases"}} AS r
    WHERE r.key = ANY (ARRAY(SELECT key FROM open))
    RETURNING r.key, r.n
), rooms AS (
    SELECT o.scope, o.name, o.key,
        COALESCE((SELECT sum(r.n) FROM returned AS r WHERE r.key = o.key), 0)::integer AS back,
        GREATEST(o.cap - o.used + COALESCE((SELECT sum(r.n) FROM returned AS r WHERE r.key = o.key), 0), 0)::integer AS room
    FROM open AS o
)`

// rateCTEs are the claim's reads of the rate limits it keeps (migration
// 21) before it reads any row: the rate limits of its queue and of the
// kinds it claims (rated), each share's room in this claim's snapshot, the
// shares read unlocked (rate_view: its cap less its starts within the
// period that ends at this statement's time), and each limit's room so
// (rate_seen), in starts: the claim reads no row of a kind whose limit has
// none, and no more rows of its queue than its queue's limit has starts.
// The shares it takes starts from are locked once the rows are read
// (rateLockCTEs).
const rateCTEs = `rated AS (
    SELECT l.scope, l.name, l.id, l.max_starts, l.period_us * interval '1 microsecond' AS period,
        l.id::bigint * 100000 AS first, l.id::bigint * 100000 + ` + limitSlots + ` AS past,
        CASE WHEN $4 = '' THEN floor(random() * ` + limitSlots + `)::integer
             ELSE mod(abs(hashtext($4)::bigint), ` + limitSlots + `)::integer END AS start
    FROM {{schema}}.{{name "rate_limits"}} AS l
    WHERE (l.scope = 'queue' AND l.name = $5)
       OR (l.scope = 'kind' AND (cardinality($2::text[]) = 0 OR l.name = ANY ($2::text[])))
), rate_view AS (
    -- turn: the share's place from the one drawn from the worker's name
    -- (at random without one), so that the claims of many workers do not
    -- all lock the same shares.
    SELECT l.scope, l.name, l.id, s.key, (s.share - l.start + ` + limitSlots + `) % ` + limitSlots + ` AS turn,
        GREATEST(s.cap - (SELECT count(*) FROM unnest(s.starts) AS t WHERE t > statement_timestamp() - l.period), 0) AS room
    FROM rated AS l
    JOIN {{schema}}.{{name "rate_shares"}} AS s ON s.key >= l.first AND s.key < l.past
), rate_seen AS (
    SELECT l.scope, l.name, COALESCE((SELECT sum(v.room) FROM rate_view AS v WHERE v.id = l.id), 0) AS n
    FROM rated AS l
)`

// rateLockCTEs follow candidates: the starts each rate limit's rows among
// them need (rate_want: the costs of the first Limit of them, in the
// claim's order), the shares to take them from, from the one drawn on,
// those with room in the snapshot until their room covers that
// (rate_picked), locked SKIP LOCKED as the concurrency limits' slots are,
// with each one's room as last committed (rate_rooms), and each limit's
// room in those (rate_free), in starts. The shares are chosen for the
// starts the rows need, not for their count: an event that costs more
// than a share's room is taken by a claim of one row while the limit has
// room for it.
const rateLockCTEs = `rate_want AS (
    SELECT l.id, (SELECT COALESCE(sum(c.cost), 0) FROM (
                     SELECT c.cost FROM candidates AS c WHERE l.scope = 'queue' OR c.kind = l.name
                     ORDER BY c.ord LIMIT $1) AS c) AS units
    FROM rated AS l
), rate_picked AS (
    SELECT p.key FROM (
        SELECT v.key, sum(v.room) OVER (PARTITION BY v.id ORDER BY v.turn) - v.room AS before,
            (SELECT w.units FROM rate_want AS w WHERE w.id = v.id) AS units
        FROM rate_view AS v
        WHERE v.room > 0) AS p
    WHERE p.before < p.units
), rate_rooms AS (
    SELECT l.scope, l.name, o.key,
        GREATEST(o.cap - (SELECT count(*) FROM unnest(o.starts) AS t WHERE t > statement_timestamp() - l.period), 0) AS room
    FROM (SELECT s.key, s.cap, s.starts FROM {{schema}}.{{name "rate_shares"}} AS s
          WHERE s.key = ANY (ARRAY(SELECT key FROM rate_picked))
          ORDER BY s.key
          FOR UPDATE SKIP LOCKED) AS o
    JOIN rated AS l ON o.key >= l.first AND o.key < l.past
), rate_free AS (
    SELECT l.scope, l.name, COALESCE((SELECT sum(r.room) FROM rate_rooms AS r WHERE r.scope = l.scope AND r.name = l.name), 0) AS n
    FROM rated AS l
)`

// rateTakingCTEs record the starts of the rows claimed under rate limits:
// each limit's starts (rate_used: the costs of its kind's rows, or of all
// of them for the queue's), taken from its locked shares in key order, as
// many from each as it has room (rate_taking), and written (rate_held): a
// share adds one start at this statement's time for each it gives, and
// keeps its latest starts, as many as its cap. It never drops a start by
// this statement's time: a claim whose statement began earlier may lock
// the share after this one commits, and a start out of this claim's
// window may be in that one's. One dropped is older than cap others kept,
// which that claim counts too: it finds no room, as it would with all of
// them. held_whole fails the statement if a start was not written.
const rateTakingCTEs = `rate_used AS (
    SELECT l.scope, l.name,
        CASE WHEN l.scope = 'kind' THEN (SELECT COALESCE(sum(c.cost), 0) FROM chosen AS c WHERE c.kind = l.name)
             ELSE (SELECT COALESCE(sum(c.cost), 0) FROM chosen AS c) END AS units
    FROM rated AS l
), rate_taking AS (
    SELECT r.key,
        LEAST(r.room, GREATEST((SELECT u.units FROM rate_used AS u WHERE u.scope = r.scope AND u.name = r.name)
                               - (sum(r.room) OVER (PARTITION BY r.scope, r.name ORDER BY r.key) - r.room), 0))::integer AS k
    FROM rate_rooms AS r
), rate_held AS (
    UPDATE {{schema}}.{{name "rate_shares"}} AS s
    SET starts = ARRAY(SELECT x.t FROM (
                     SELECT t FROM unnest(s.starts || array_fill(statement_timestamp(),
                                                                 ARRAY[(SELECT r.k FROM rate_taking AS r WHERE r.key = s.key)])) AS t
                     ORDER BY t DESC
                     LIMIT s.cap) AS x
                 ORDER BY x.t)
    WHERE s.key = ANY (ARRAY(SELECT key FROM rate_taking WHERE k > 0))
    RETURNING s.key
)`

// hasReleases says whether slot s has releases not yet counted: one probe
// of the releases' primary key (a scalar subquery, never hashed over the
// whole table).
const hasReleases = `(SELECT true FROM {{schema}}.{{name "limit_releases"}} AS r WHERE r.key = s.key LIMIT 1) IS NOT NULL`

// limitsCTEs follow expired: in a sweep, the attempts counted under a
// limit whose lease ran out that this claim cannot take back (stale), and
// what each limit admits (free, usable, room).
const limitsCTEs = `stale AS (
    -- Only a claim without floors ($7 = 0: a sweep) reads them, when a
    -- limit's slots had less room than its Limit: another queue's, or of a
    -- kind it does not claim, not on their last attempt, not cancelled
    -- (this claim's or their own queue's claims end those, and give their
    -- places back then). Each is read again under its own lock: a renewal
    -- committed after this statement's snapshot shows, and the row is
    -- skipped; a late write of its owner waits for this claim and finds
    -- its lease over (invariant 16).
    SELECT h.id, h.kind, h.queue, h.kind_slot, h.queue_slot FROM {{table}} AS h
    WHERE h.status = 'INPROGRESS' AND (h.kind_slot IS NOT NULL OR h.queue_slot IS NOT NULL)
      AND h.lease_until <= statement_timestamp() AND $7::bigint = 0
      AND h.attempt < h.max_attempts AND h.cancelled_at IS NULL
      AND h.id <> ALL (ARRAY(SELECT id FROM expired))
      AND EXISTS (SELECT 1 FROM limited AS l
                  WHERE (SELECT COALESCE(sum(r.room), 0) FROM rooms AS r WHERE r.scope = l.scope AND r.name = l.name) < $1)
    ORDER BY h.lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), pstale AS (
    -- Only a sweep ($7 = 0) reads them, when a partition limit is
    -- declared: the attempts counted in a partition's slot whose lease ran
    -- out, of any queue, not taken back here, not on their last attempt,
    -- not cancelled (as stale); each read again under its own lock. Their
    -- places are given back (moved, pstale_back): a row set aside behind
    -- one comes back.
    SELECT h.id, h.partition_slot FROM {{table}} AS h
    WHERE h.status = 'INPROGRESS' AND h.partition_slot IS NOT NULL
      AND h.lease_until <= statement_timestamp() AND $7::bigint = 0
      AND h.attempt < h.max_attempts AND h.cancelled_at IS NULL
      AND h.id <> ALL (ARRAY(SELECT id FROM expired))
      AND ` + anyPartitionLimit + `
    ORDER BY h.lease_until
    LIMIT 100
    FOR UPDATE SKIP LOCKED
), stale_places AS (
    -- Their places, in slots within their share: a place in a slot a
    -- lowered limit left counting more than its share is not taken (it
    -- frees when its holder's row ends or is taken back).
    SELECT p.scope, p.name, p.id, p.key
    FROM (SELECT l.scope, l.name, h.id, CASE WHEN l.scope = 'kind' THEN h.kind_slot ELSE h.queue_slot END AS key
          FROM stale AS h, limited AS l
          WHERE (l.scope = 'kind' AND l.name = h.kind AND h.kind_slot >= l.first AND h.kind_slot < l.past)
             OR (l.scope = 'queue' AND l.name = h.queue AND h.queue_slot >= l.first AND h.queue_slot < l.past)) AS p
    JOIN {{schema}}.{{name "limit_slots"}} AS s ON s.key = p.key AND s.used <= s.cap
), units AS (
    -- Each limit's free places, for the rows claimed that need one, as
    -- ranges of their positions: each slot's room, then the place of each
    -- stale holder (holder: the row it is taken from; 0 for a slot's
    -- room). The i-th row that needs a place under the limit takes one of
    -- the range (lo, hi] that holds i. Room first: a stale holder keeps
    -- its place unless it is needed.
    SELECT u.scope, u.name, u.key, u.holder,
        sum(u.n) OVER (PARTITION BY u.scope, u.name ORDER BY u.holder, u.key) - u.n AS lo,
        sum(u.n) OVER (PARTITION BY u.scope, u.name ORDER BY u.holder, u.key) AS hi
    FROM (SELECT scope, name, key, 0::bigint AS holder, room AS n FROM rooms WHERE room > 0
          UNION ALL
          SELECT scope, name, key, id, 1 FROM stale_places) AS u
), free AS (
    SELECT l.scope, l.name, l.first, l.past,
        LEAST(COALESCE((SELECT max(u.hi) FROM units AS u WHERE u.scope = l.scope AND u.name = l.name), 0), $1::bigint) AS n
    FROM limited AS l
), usable AS (
    -- What each limit admits, besides the expired leases this claim takes
    -- back that keep their places.
    SELECT scope, name, n FROM free
), carried AS (
    -- The expired leases that keep their places: counted in a slot of the
    -- limit of their kind or of this queue, a slot within its share (not
    -- one a lowered limit left counting more: there, a new attempt waits
    -- for a place as any row does).
    SELECT e.id,
        EXISTS (SELECT 1 FROM free AS f, {{schema}}.{{name "limit_slots"}} AS s
                WHERE f.scope = 'kind' AND f.name = e.kind AND e.kind_slot >= f.first AND e.kind_slot < f.past
                  AND s.key = e.kind_slot AND s.used <= s.cap) AS kind,
        EXISTS (SELECT 1 FROM free AS f, {{schema}}.{{name "limit_slots"}} AS s
                WHERE f.scope = 'queue' AND e.queue_slot >= f.first AND e.queue_slot < f.past
                  AND s.key = e.queue_slot AND s.used <= s.cap) AS queue
    FROM expired AS e
), room AS (
    -- The most rows the claim takes: its Limit, and its queue's limit.
    SELECT LEAST($1::bigint, (SELECT n FROM usable WHERE scope = 'queue')
                             + (SELECT count(*) FROM carried WHERE queue),
                  (SELECT n FROM rate_seen WHERE scope = 'queue')) AS n
)`

// admitCTEs keep each kind's limit among the rows found (expired, then
// ready), give each row claimed under a limit a place in one of its slots
// (slotted, counted), and say whether a limit kept this claim from rows it
// would otherwise have taken (held_back): its queue's limit cut its Limit,
// or a kind's limit kept rows of the kind from it. Those are skipped, so a
// READY row due earlier than a row claimed, or an expired lease older
// than one taken back, may be left.
const admitCTEs = `candidates AS (
    SELECT c.id, c.kind, c.generation, c.kind_slot, c.queue_slot, c.part, c.key, c.partition_key, c.partition_slot, c.cost,
        COALESCE(k.kind, false) AS carry_kind, COALESCE(k.queue, false) AS carry_queue,
        row_number() OVER (ORDER BY c.part = 1, c.part, c.level, c.vt, c.at, c.id) AS ord
    FROM (SELECT id, kind, generation, kind_slot, queue_slot, 0 AS part, 0 AS level, lease_until AS at,
              key, partition_key, partition_slot, cost, 0::float8 AS vt FROM expired
          UNION ALL
          SELECT id, kind, generation, NULL, NULL, 1, level, next_attempt_at, key, partition_key, NULL, cost, vt FROM ready
          UNION ALL
          SELECT id, kind, generation, NULL, NULL, 2, level, next_attempt_at, NULL, partition_key, NULL, cost, 0 FROM aside) AS c
    LEFT JOIN carried AS k ON k.id = c.id
), ` + rateLockCTEs + `, ranked AS (
    -- in_kind: a row's place among its kind's rows that need one;
    -- kind_units: the starts of its kind's rows up to it. A row that
    -- costs more than a rate limit over it allows in a whole period
    -- (too_costly) never starts; it is passed over, and takes no start
    -- from the rows behind it.
    SELECT c.*, row_number() OVER (PARTITION BY c.kind, c.carry_kind ORDER BY c.ord) AS in_kind,
        sum(c.cost) FILTER (WHERE NOT c.too_costly) OVER (PARTITION BY c.kind ORDER BY c.ord) AS kind_units
    FROM (SELECT c.*,
              c.cost > COALESCE((SELECT l.max_starts FROM rated AS l WHERE l.scope = 'kind' AND l.name = c.kind), c.cost)
              OR c.cost > COALESCE((SELECT l.max_starts FROM rated AS l WHERE l.scope = 'queue'), c.cost) AS too_costly
          FROM candidates AS c) AS c
), admitted AS (
    SELECT r.*, row_number() OVER (PARTITION BY r.carry_queue ORDER BY r.ord) AS in_queue
    FROM ranked AS r
    WHERE (r.carry_kind
           OR r.in_kind <= COALESCE((SELECT u.n FROM usable AS u WHERE u.scope = 'kind' AND u.name = r.kind), r.in_kind))
      AND NOT r.too_costly
      AND r.kind_units <= COALESCE((SELECT f.n FROM rate_free AS f WHERE f.scope = 'kind' AND f.name = r.kind), r.kind_units)
), taken AS (
    -- The expired leases are read before the queue's limit is known. No
    -- more than the claim's Limit: the rows set aside come on top of the
    -- others.
    SELECT * FROM (
        SELECT a.*, row_number() OVER (ORDER BY a.ord) AS nth, sum(a.cost) OVER (ORDER BY a.ord) AS queue_units FROM admitted AS a
        WHERE a.carry_queue OR a.in_queue <= COALESCE((SELECT u.n FROM usable AS u WHERE u.scope = 'queue'), a.in_queue)) AS a
    WHERE a.nth <= $1
      AND a.queue_units <= COALESCE((SELECT f.n FROM rate_free AS f WHERE f.scope = 'queue'), a.queue_units)
), ` + partitionCTEs + `, ` + fairTakingCTEs + `, place_needs AS (
    -- The places each limit gives the rows claimed: one to each row that
    -- keeps none of its own under it (n; one read of the batch a limit),
    -- and the limit's index (ix) in the codes of place_fast.
    SELECT l.scope, l.name, row_number() OVER (ORDER BY l.scope, l.name) AS ix,
        (SELECT count(*) FROM chosen AS t
         WHERE CASE WHEN l.scope = 'kind' THEN t.kind = l.name AND NOT t.carry_kind ELSE NOT t.carry_queue END) AS n
    FROM limited AS l
), place_ranges AS (
    -- The ranges of places from the slots' room, each with its code (its
    -- limit's index times 2^40, plus its first place) and its limit's
    -- count of places given (n). Each looks its limit up, a scan of a few
    -- rows: no join, which the claim's plan keeps free of hash joins.
    SELECT u.key, u.lo, u.hi, x.ix * 1099511627776 + u.lo + 1 AS code, x.n
    FROM units AS u
    CROSS JOIN LATERAL (SELECT n.ix, n.n FROM place_needs AS n WHERE n.scope = u.scope AND n.name = u.name) AS x
    WHERE u.holder = 0
), place_fast AS (
    -- Whether the rows claimed take their places from the room of their
    -- limits' slots, none from a stale holder, and none keeps a place of
    -- its own (yes): then no row is placed one by one (placed reads none),
    -- and the UPDATE gives each row its places itself, by binary searches
    -- in three sorted arrays. Under a limit, the rows take its places in
    -- the order of their ids: the row of rank r takes the r-th place, in
    -- the range of places (units) that holds r. A row's code under a
    -- limit is ix * 2^40 + its id (rows, sorted: a row's rank is its
    -- position less the limit's first); a range's is ix * 2^40 + its
    -- first place (starts, sorted, with their slots). A row id from 2^40
    -- on takes the slow way. Under no limit, nothing is read.
    SELECT NOT EXISTS (SELECT 1 FROM limited)
           OR (NOT EXISTS (SELECT 1 FROM chosen AS t WHERE t.carry_kind OR t.carry_queue OR t.id >= 1099511627776)
               AND NOT EXISTS (SELECT 1 FROM place_needs AS n
                               WHERE n.n > COALESCE((SELECT max(u.hi) FROM units AS u
                                                     WHERE u.scope = n.scope AND u.name = n.name AND u.holder = 0), 0))) AS yes,
        (SELECT jsonb_object_agg(n.name, n.ix) FROM place_needs AS n WHERE n.scope = 'kind') AS kinds,
        (SELECT n.ix FROM place_needs AS n WHERE n.scope = 'queue') AS queue,
        ARRAY(SELECT n.ix * 1099511627776 + t.id FROM place_needs AS n
              JOIN chosen AS t ON n.scope = 'queue' OR t.kind = n.name
              ORDER BY 1) AS rows,
        ARRAY(SELECT u.code FROM place_ranges AS u ORDER BY u.code) AS starts,
        ARRAY(SELECT u.key FROM place_ranges AS u ORDER BY u.code) AS slots
), placed AS (
    -- The place each row claimed takes under each limit, as [slot key,
    -- row it is taken from], when place_fast cannot say: its own, when it
    -- keeps it; else the i-th row of a kind the i-th free place of its
    -- kind's limit, the i-th row of the queue the i-th of the queue's.
    -- With its place in its partition's slot, for slot_map.
    SELECT t.id, t.part_slot,
        CASE WHEN t.carry_kind THEN ARRAY[t.kind_slot, NULL]
             ELSE (SELECT ARRAY[u.key, u.holder] FROM units AS u
                   WHERE u.scope = 'kind' AND u.name = t.kind AND t.kind_pos > u.lo AND t.kind_pos <= u.hi) END AS k,
        CASE WHEN t.carry_queue THEN ARRAY[t.queue_slot, NULL]
             ELSE (SELECT ARRAY[u.key, u.holder] FROM units AS u
                   WHERE u.scope = 'queue' AND t.queue_pos > u.lo AND t.queue_pos <= u.hi) END AS q
    FROM chosen AS t
    -- None under no limit, nor when place_fast places them all.
    WHERE NOT (SELECT yes FROM place_fast)
), slotted AS (
    SELECT id, part_slot, k[1] AS kind_slot, k[2] AS kind_from, q[1] AS queue_slot, q[2] AS queue_from FROM placed
), counted AS (
    -- Each slot's count changes by the places taken from its room, less
    -- the releases counted now.
    SELECT u.key, sum(u.d)::integer AS d FROM (
        SELECT kind_slot AS key, 1 AS d FROM slotted WHERE kind_from = 0
        UNION ALL
        SELECT queue_slot, 1 FROM slotted WHERE queue_from = 0
        UNION ALL
        -- Under place_fast, each slot's room gives the places of the
        -- ranks in its range.
        SELECT u.key, (LEAST(u.hi, u.n) - u.lo)::integer FROM place_ranges AS u
        WHERE u.n > u.lo AND (SELECT yes FROM place_fast)
        UNION ALL
        SELECT key, -back FROM rooms WHERE back > 0) AS u
    GROUP BY u.key
    HAVING sum(u.d) <> 0
), held AS (
    -- The slots counted in are named by an array of their keys: a
    -- primary-key scan, whatever the plan; each looks its change up in a
    -- JSON object (a binary search).
    UPDATE {{schema}}.{{name "limit_slots"}} AS s
    SET used = s.used + ((SELECT jsonb_object_agg(c.key::text, c.d) FROM counted AS c) ->> s.key::text)::integer
    WHERE s.key = ANY (ARRAY(SELECT key FROM counted))
    RETURNING s.key
), moved AS (
    -- The stale holders whose places were taken are counted no longer,
    -- and those whose partition's place a sweep takes (pstale).
    UPDATE {{table}} AS o
    SET kind_slot = CASE WHEN o.id = ANY (ARRAY(SELECT kind_from FROM slotted WHERE kind_from > 0)) THEN NULL ELSE o.kind_slot END,
        queue_slot = CASE WHEN o.id = ANY (ARRAY(SELECT queue_from FROM slotted WHERE queue_from > 0)) THEN NULL ELSE o.queue_slot END,
        partition_slot = CASE WHEN o.id = ANY (ARRAY(SELECT id FROM pstale)) THEN NULL ELSE o.partition_slot END
    WHERE o.id = ANY (ARRAY(SELECT kind_from FROM slotted WHERE kind_from > 0
                            UNION ALL
                            SELECT queue_from FROM slotted WHERE queue_from > 0
                            UNION ALL
                            SELECT id FROM pstale))
    RETURNING o.id
), pstale_back AS (
    -- The places of pstale, given back to their slots.
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT p.partition_slot, count(*) FROM pstale AS p
    WHERE p.id = ANY (ARRAY(SELECT id FROM moved))
    GROUP BY p.partition_slot
), ` + rateTakingCTEs + `, slot_map AS (
    -- The rows' places by row id, for the UPDATE below to look up, when
    -- place_fast and part_fast do not give them: none when no limit
    -- applies. slotted has every row chosen while a kind or queue limit
    -- applies that place_fast does not place, and none else: then chosen
    -- gives the places in partitions' slots alone, unless part_fast does.
    SELECT jsonb_object_agg(u.id::text, jsonb_build_array(u.kind_slot, u.queue_slot, u.part_slot)) AS m
    FROM (SELECT s.id, s.kind_slot, s.queue_slot, s.part_slot FROM slotted AS s
          WHERE s.kind_slot IS NOT NULL OR s.queue_slot IS NOT NULL OR s.part_slot IS NOT NULL
          UNION ALL
          SELECT c.id, NULL, NULL, c.part_slot FROM chosen AS c
          WHERE c.part_slot IS NOT NULL AND EXISTS (SELECT 1 FROM parts) AND (SELECT yes FROM place_fast)
            AND NOT (SELECT yes FROM part_fast)) AS u
), held_whole AS (
    -- Every slot whose count changes was written, and every stale holder
    -- whose place was taken: the statement fails (division by zero)
    -- rather than claim a row under a limit uncounted. A slot this claim
    -- locked cannot go away (a cleared limit's delete waits for the lock);
    -- a slot not written is a fault of the statement, and the claim must
    -- not commit past it.
    SELECT 1 / ((SELECT count(*) FROM held) = (SELECT count(*) FROM counted)
                AND (SELECT count(*) FROM part_held) = (SELECT count(*) FROM part_counted WHERE d <> 0 OR units > 0)
                AND (SELECT COALESCE(sum(k), 0) FROM rate_taking) = (SELECT COALESCE(sum(units), 0) FROM rate_used)
                AND (SELECT count(*) FROM rate_held) = (SELECT count(*) FROM rate_taking WHERE k > 0)
                AND (SELECT count(*) FROM moved) = (SELECT count(DISTINCT u.id) FROM (
                    SELECT kind_from AS id FROM slotted WHERE kind_from > 0
                    UNION ALL
                    SELECT queue_from FROM slotted WHERE queue_from > 0) AS u)
                       + (SELECT count(*) FROM pstale AS p
                          WHERE p.id NOT IN (SELECT kind_from FROM slotted WHERE kind_from > 0
                                             UNION ALL
                                             SELECT queue_from FROM slotted WHERE queue_from > 0)))::integer AS yes
), held_back AS (
    SELECT (SELECT n FROM room) < $1
        OR EXISTS (SELECT 1 FROM usable WHERE scope = 'kind' AND n = 0)
        OR EXISTS (SELECT 1 FROM rate_seen WHERE n = 0)
        OR (SELECT count(*) FROM chosen) < (SELECT count(*) FROM candidates) AS yes`

// anyPartitionRate says whether a partition rate limit is declared: a
// probe of their primary key, evaluated once (uncorrelated), so that a
// claim under partition concurrency limits alone does not probe the rates
// of each partition.
const anyPartitionRate = `(SELECT true FROM {{schema}}.{{name "partition_rates"}} ORDER BY partition LIMIT 1) IS NOT NULL`

// anyPartitionLimit says whether a partition limit is declared, of
// concurrency or of rate (migration 24): a probe of each one's primary key.
// anySetAside says whether any row is set aside by a full partition in
// the claim's snapshot: one entry of the index of rows set aside, read in
// its order whatever the statistics say. Without one, no partition has a
// row set aside to look for, and a claim probes none of them.
const anySetAside = `(SELECT true FROM {{table}} AS w WHERE w.status = 'WAITING' AND w.key IS NULL
         ORDER BY w.partition_key, w.priority, w.next_attempt_at, w.id LIMIT 1) IS NOT NULL`

const anyPartitionLimit = `((SELECT true FROM {{schema}}.{{name "partition_limits"}} ORDER BY partition LIMIT 1) IS NOT NULL
    OR (SELECT true FROM {{schema}}.{{name "partition_rates"}} ORDER BY partition LIMIT 1) IS NOT NULL)`

// partitionCTEs keep the partition limits (migration 19) among the rows
// taken under the kind and queue limits. parts: the partitions of those
// rows under a limit, each with its Max (its own, or the default), the id
// of its slot in this claim's snapshot, and its rows taken (n).
// part_woken: wake_partitions, run once, counts the releases of other
// partitions' slots and brings back their rows set aside, while a
// partition limit or a slot is left (the last limit cleared, the slots go
// as their partitions' rows come back); part_look reads it as the outer
// side of a join, so it runs whenever the claim runs. part_locks: the
// slots of parts, locked SKIP LOCKED in partition order; a partition whose
// slot another claim holds is passed over, its rows neither taken nor set
// aside. part_back: their releases, counted now. part_made: the slots of
// partitions that had none, made with the places this claim takes in them
// (a slot made by another claim since this claim's snapshot is passed
// over). part_fit: each row under a partition limit, and whether it has a
// place: it keeps its own (taken back), or is within its partition's
// room, by the claim's order. chosen: the rows claimed, ranked again
// within their kind and queue (a subset's ranks are no higher, so each
// still has its place under those limits). set_aside: the READY rows
// without a key that a full partition holds back, made WAITING (out of
// the READY index); a release of n = 0 after them says "look again" to
// the claims that follow, as it does when this claim leaves room in a slot
// after counting releases.
//
// Each step reads another once, never once per row of its own. A value
// that a step needs for each of its rows from a step of other rows (a
// partition's Max and slot, a slot's releases, room or places taken, a
// row's place) is looked up by key in a JSON object (a binary search)
// into which that step's rows were aggregated once: part_of, part_backs,
// part_slots_of, part_fits, part_took. A scan of a CTE carries no useful
// estimate of its rows, and a join of two was planned as a nested loop
// that read one whole for each row of the other: the square of the batch
// (a claim of 1,000 rows of partitions with room read part_fit 1,000
// times, and threw 999,000 rows away).
const partitionCTEs = `parts AS (
    SELECT d.partition, c.cap, r.max_starts AS rmax, r.period_us,
        (SELECT s.id FROM {{schema}}.{{name "partition_slots"}} AS s WHERE s.partition = d.partition) AS slot,
        d.n, d.expired
    FROM (SELECT partition_key AS partition, count(*) AS n, bool_or(part = 0) AS expired FROM taken
          WHERE partition_key IS NOT NULL AND ` + anyPartitionLimit + `
          GROUP BY partition_key) AS d
    CROSS JOIN LATERAL (SELECT COALESCE(
        (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = d.partition),
        (SELECT l.max_live FROM {{schema}}.{{name "partition_limits"}} AS l WHERE l.partition = '')) AS cap
        OFFSET 0) AS c
    LEFT JOIN LATERAL (
        -- Its rate limit, read only when one is declared.
        SELECT l.max_starts, l.period_us FROM {{schema}}.{{name "partition_rates"}} AS l
        WHERE l.partition IN (d.partition, '') AND ` + anyPartitionRate + `
        ORDER BY l.partition = ''
        LIMIT 1) AS r ON true
    WHERE c.cap IS NOT NULL OR r.max_starts IS NOT NULL
), part_of AS (
    -- parts by partition: [cap, slot, rate Max, rate period (µs), rows
    -- taken].
    SELECT jsonb_object_agg(p.partition, jsonb_build_array(p.cap, p.slot, p.rmax, p.period_us, p.n)) AS m FROM parts AS p
), part_woken AS MATERIALIZED (
    SELECT {{schema}}.{{name "wake_partitions"}}(ARRAY(SELECT partition FROM parts)) AS ps
    WHERE ` + anyPartitionLimit + `
       OR (SELECT true FROM {{schema}}.{{name "partition_slots"}} ORDER BY partition LIMIT 1) IS NOT NULL
), part_locks AS (
    SELECT s.partition, s.id, s.used, s.starts FROM {{schema}}.{{name "partition_slots"}} AS s
    WHERE s.id = ANY (ARRAY(SELECT slot FROM parts WHERE slot IS NOT NULL))
    ORDER BY s.partition
    FOR UPDATE SKIP LOCKED
), part_back AS (
    DELETE FROM {{schema}}.{{name "partition_releases"}} AS r
    WHERE r.slot = ANY (ARRAY(SELECT id FROM part_locks))
    RETURNING r.slot, r.n
), part_backs AS (
    -- The places part_back gives back, by slot.
    SELECT jsonb_object_agg(b.slot::text, b.n) AS m
    FROM (SELECT r.slot, sum(r.n) AS n FROM part_back AS r GROUP BY r.slot) AS b
), part_ranked AS (
    -- in_part: a row's place among its partition's rows that need one.
    -- units: the starts of its partition's rows up to it, but those that
    -- cost more than the partition's rate limit allows in a whole period
    -- (too_costly: they never start, and take no start from the rows
    -- behind them). capped, rated: its partition is under a concurrency
    -- limit, a rate limit. new_fits: whether it fits in a partition
    -- without a slot yet, which this claim makes. p: its partition's
    -- entry of part_of, none for a partition under no limit. A claim
    -- under no partition limit reads no row here.
    SELECT r.*,
        (NOT r.rated OR (NOT r.too_costly AND r.units <= r.rmax))
            AND (NOT r.capped OR r.in_part <= r.cap) AND r.slot0 IS NULL AS new_fits
    FROM (SELECT t.id, t.part, t.key, t.partition_key, t.cost, c.carry_part, c.too_costly,
              (p.v ->> 0) IS NOT NULL AS capped, (p.v ->> 2) IS NOT NULL AS rated,
              (p.v ->> 0)::integer AS cap, (p.v ->> 2)::integer AS rmax, (p.v ->> 1)::bigint AS slot0,
              row_number() OVER (PARTITION BY t.partition_key, c.carry_part ORDER BY t.ord) AS in_part,
              COALESCE(sum(t.cost) FILTER (WHERE NOT c.too_costly) OVER (PARTITION BY t.partition_key ORDER BY t.ord), 0) AS units
          FROM taken AS t
          CROSS JOIN LATERAL (SELECT (SELECT m FROM part_of) -> t.partition_key AS v) AS p
          CROSS JOIN LATERAL (SELECT COALESCE(t.part = 0 AND t.partition_slot = (p.v ->> 1)::bigint, false) AS carry_part,
                                     COALESCE(t.cost > (p.v ->> 2)::integer, false) AS too_costly) AS c
          WHERE p.v IS NOT NULL AND EXISTS (SELECT 1 FROM parts)) AS r
), part_rooms AS (
    -- Each locked slot's room for attempts (all the room there is under
    -- no concurrency limit), and for starts under its rate limit (NULL
    -- under none), with when the oldest start of its window leaves it.
    SELECT l.partition, l.id, b.back,
        CASE WHEN b.cap IS NULL THEN 2147483647 ELSE GREATEST(b.cap - l.used + b.back, 0) END AS room,
        COALESCE(l.used - b.back > b.cap, false) AS over,
        CASE WHEN b.rmax IS NULL THEN NULL ELSE GREATEST(b.rmax - w.recent, 0) END AS rate_room, b.rmax, w.next_at
    FROM part_locks AS l
    CROSS JOIN LATERAL (SELECT COALESCE(((SELECT m FROM part_backs) ->> l.id::text)::integer, 0) AS back,
                               ((SELECT m FROM part_of) -> l.partition ->> 0)::integer AS cap,
                               ((SELECT m FROM part_of) -> l.partition ->> 2)::integer AS rmax,
                               ((SELECT m FROM part_of) -> l.partition ->> 3)::bigint * interval '1 microsecond' AS period) AS b
    -- The window of starts, read under a rate limit only.
    CROSS JOIN LATERAL (SELECT CASE WHEN b.rmax IS NOT NULL THEN (SELECT count(*) FROM unnest(l.starts) AS t
                                                                 WHERE t > statement_timestamp() - b.period) END AS recent,
                               CASE WHEN b.rmax IS NOT NULL THEN (SELECT min(t) + b.period FROM unnest(l.starts) AS t
                                                                 WHERE t > statement_timestamp() - b.period) END AS next_at) AS w
), part_new AS (
    -- The rows that fit in each partition without a slot, and their
    -- starts, by partition: [rows, starts].
    SELECT jsonb_object_agg(n.partition_key, jsonb_build_array(n.took, n.units)) AS m
    FROM (SELECT r.partition_key, count(*) AS took, sum(r.cost) AS units FROM part_ranked AS r
          WHERE r.new_fits
          GROUP BY r.partition_key) AS n
), part_made AS (
    -- A slot counts the attempts it admits under a concurrency limit
    -- only, and keeps the starts under a rate limit only.
    INSERT INTO {{schema}}.{{name "partition_slots"}} AS s (partition, used, starts)
    SELECT p.partition, CASE WHEN p.cap IS NULL THEN 0 ELSE x.took END,
        CASE WHEN p.rmax IS NULL OR x.units = 0 THEN '{}'::timestamptz[]
             ELSE array_fill(statement_timestamp(), ARRAY[x.units]) END
    FROM parts AS p
    CROSS JOIN LATERAL (SELECT COALESCE(((SELECT m FROM part_new) -> p.partition ->> 0)::integer, 0) AS took,
                               COALESCE(((SELECT m FROM part_new) -> p.partition ->> 1)::integer, 0) AS units) AS x
    WHERE p.slot IS NULL
    ORDER BY p.partition
    ON CONFLICT (partition) DO NOTHING
    RETURNING s.partition, s.id
), part_slots_of AS (
    -- The slots of part_rooms ([id, room, over, rate room, next_at]) and
    -- of part_made ([id]), by partition.
    SELECT (SELECT jsonb_object_agg(l.partition, jsonb_build_array(l.id, l.room, l.over, l.rate_room, l.next_at))
            FROM part_rooms AS l) AS locked,
        (SELECT jsonb_object_agg(m.partition, jsonb_build_array(m.id)) FROM part_made AS m) AS made
), part_fast AS (
    -- Whether every row taken fits, none one by one (yes): each partition
    -- of parts has its slot, locked here, under a concurrency limit alone,
    -- not over it, with room for all its rows taken, none of them an
    -- expired lease taken back (it may keep its place). Then chosen takes
    -- every row taken, each counted in its partition's slot, and nothing
    -- reads part_ranked or part_fit: a limit that does not bind costs its
    -- partitions, not its rows.
    SELECT NOT EXISTS (SELECT 1 FROM parts AS p WHERE p.slot IS NULL OR p.rmax IS NOT NULL OR p.expired)
       AND (SELECT count(*) FROM part_rooms) = (SELECT count(*) FROM parts)
       AND NOT EXISTS (SELECT 1 FROM part_rooms AS l
                       WHERE l.over OR l.rate_room IS NOT NULL
                          OR l.room < ((SELECT m FROM part_of) -> l.partition ->> 4)::integer) AS yes
), part_fit AS (
    SELECT r.id, r.part, r.key, r.partition_key, r.cost, r.capped, r.rated, r.too_costly, COALESCE(l.id, m.id) AS slot,
        r.carry_part AND l.id IS NOT NULL AND NOT l.over AS kept,
        CASE WHEN l.id IS NOT NULL THEN ((r.carry_part AND NOT l.over) OR r.in_part <= l.room)
                                        AND (l.rate_room IS NULL OR (NOT r.too_costly AND r.units <= l.rate_room))
             WHEN m.id IS NOT NULL THEN r.new_fits
             ELSE false END AS fits
    FROM part_ranked AS r
    -- Its partition's slot, locked (l) or made (m), if either.
    CROSS JOIN LATERAL (SELECT (SELECT locked FROM part_slots_of) -> r.partition_key AS l,
                               (SELECT made FROM part_slots_of) -> r.partition_key AS m) AS s
    CROSS JOIN LATERAL (SELECT (s.l ->> 0)::bigint AS id, (s.l ->> 1)::integer AS room, (s.l ->> 2)::boolean AS over,
                               (s.l ->> 3)::integer AS rate_room) AS l
    CROSS JOIN LATERAL (SELECT (s.m ->> 0)::bigint AS id) AS m
), part_fits AS (
    -- part_fit by row id: [fits, the slot it is counted in (under a
    -- concurrency limit), its slot].
    SELECT jsonb_object_agg(f.id::text, jsonb_build_array(f.fits, CASE WHEN f.capped THEN f.slot END, f.slot)) AS m
    FROM part_fit AS f
), chosen AS (
    SELECT t.*,
        CASE WHEN t.partition_key IS NULL THEN NULL
             WHEN (SELECT yes FROM part_fast) THEN ((SELECT m FROM part_of) -> t.partition_key ->> 1)::bigint
             ELSE (f.v ->> 1)::bigint END AS part_slot,
        row_number() OVER (PARTITION BY t.kind, t.carry_kind ORDER BY t.ord) AS kind_pos,
        row_number() OVER (PARTITION BY t.carry_queue ORDER BY t.ord) AS queue_pos
    FROM taken AS t
    -- Its entry of part_fits, none for a row under no partition limit
    -- (a row of no partition is not looked up), nor when part_fast says
    -- every row fits.
    CROSS JOIN LATERAL (SELECT CASE WHEN t.partition_key IS NOT NULL AND NOT (SELECT yes FROM part_fast)
                                    THEN (SELECT m FROM part_fits) -> t.id::text END AS v) AS f
    WHERE f.v IS NULL OR (f.v ->> 0)::boolean
), set_aside AS (
    UPDATE {{table}} AS o
    SET status = 'WAITING', updated_at = statement_timestamp()
    WHERE o.id = ANY (ARRAY(SELECT id FROM part_fit WHERE NOT fits AND slot IS NOT NULL AND part = 1 AND key IS NULL
                                                  AND NOT (SELECT yes FROM part_fast)))
      AND o.status = 'READY' COLLATE "C"
    RETURNING o.id, o.partition_key
), part_took AS (
    -- The places taken from each slot's room, by slot: its rows that fit
    -- under a concurrency limit and keep no place of their own (under
    -- part_fast, all its partition's rows taken).
    SELECT jsonb_object_agg(f.slot::text, f.n) AS m
    FROM (SELECT f.slot, count(*) AS n FROM part_fit AS f
          WHERE f.fits AND NOT f.kept AND f.capped AND f.slot IS NOT NULL AND NOT (SELECT yes FROM part_fast)
          GROUP BY f.slot
          UNION ALL
          SELECT p.slot, p.n FROM parts AS p WHERE (SELECT yes FROM part_fast)) AS f
), part_units AS (
    -- The starts taken from each slot under a rate limit, by slot.
    SELECT jsonb_object_agg(f.slot::text, f.n) AS m
    FROM (SELECT f.slot, sum(f.cost) AS n FROM part_fit AS f
          WHERE f.fits AND f.rated AND f.slot IS NOT NULL AND NOT (SELECT yes FROM part_fast)
          GROUP BY f.slot) AS f
), part_counted AS (
    -- Each locked slot's count changes by the places taken from its room,
    -- less the releases counted now; its starts by the starts taken.
    SELECT l.id, l.partition, l.back, l.room - t.n AS left_over, (t.n - l.back)::integer AS d, u.n AS units, l.rmax,
        l.rate_room - u.n AS rate_left
    FROM part_rooms AS l
    CROSS JOIN LATERAL (SELECT COALESCE(((SELECT m FROM part_took) ->> l.id::text)::integer, 0) AS n) AS t
    CROSS JOIN LATERAL (SELECT COALESCE(((SELECT m FROM part_units) ->> l.id::text)::integer, 0) AS n) AS u
), part_left AS (
    -- The locked slots whose partitions keep rows set aside that this
    -- claim does not take (of another queue or kind, say), among those
    -- whose releases it counted (a look again included) and those its
    -- starts left without room under their rate limit: the releases were
    -- theirs to bring back, and a full window must ring for them. One
    -- probe of the index of rows set aside each; rows this statement sets
    -- aside are not in its snapshot (part_look and part_timed see to
    -- them). A row that costs more than its partition's rate limit allows
    -- is not counted: it never starts under it.
    SELECT c.id, c.partition, c.left_over, c.rate_left, c.id = ANY (ARRAY(SELECT r.slot FROM part_back AS r)) AS looked
    FROM part_counted AS c
    WHERE (c.id = ANY (ARRAY(SELECT r.slot FROM part_back AS r)) OR c.rate_left <= 0)
      AND ` + anySetAside + `
      AND (SELECT true FROM {{table}} AS a
           WHERE a.partition_key = c.partition AND a.status = 'WAITING' AND a.key IS NULL
             AND a.cost <= COALESCE(c.rmax, a.cost)
             AND a.id <> ALL (ARRAY(SELECT h.id FROM chosen AS h))
           LIMIT 1) IS NOT NULL
), part_changes AS (
    -- part_counted's changes by slot: [d, starts taken, rate Max].
    SELECT jsonb_object_agg(c.id::text, jsonb_build_array(c.d, c.units, c.rmax)) AS m
    FROM part_counted AS c
    WHERE c.d <> 0 OR c.units > 0
), part_held AS (
    -- A slot adds one start at this statement's time for each it gives,
    -- and keeps its latest starts, as many as its rate limit's Max, as a
    -- share of a kind's rate limit does (rateTakingCTEs).
    UPDATE {{schema}}.{{name "partition_slots"}} AS s
    SET used = s.used + ((SELECT m FROM part_changes) -> s.id::text ->> 0)::integer,
        starts = CASE WHEN ((SELECT m FROM part_changes) -> s.id::text ->> 1)::integer > 0
                      THEN ARRAY(SELECT x.t FROM (
                          SELECT t FROM unnest(s.starts || array_fill(statement_timestamp(),
                                                   ARRAY[((SELECT m FROM part_changes) -> s.id::text ->> 1)::integer])) AS t
                          ORDER BY t DESC
                          LIMIT ((SELECT m FROM part_changes) -> s.id::text ->> 2)::integer) AS x
                          ORDER BY x.t)
                      ELSE s.starts END
    WHERE s.id = ANY (ARRAY(SELECT id FROM part_counted WHERE d <> 0 OR units > 0))
    RETURNING s.id
), part_timed AS (
    -- A slot whose rate limit held back a row here gets a timer for when
    -- the oldest start of its window leaves it (a period from now, when
    -- this claim's are its only starts): wake_partitions brings back its
    -- rows set aside then. Not for a row that costs more than the limit
    -- allows in a window: no time gives it room (a change of the limit
    -- looks again). A timer already due is this claim's to move: it
    -- counted the partition's room itself (wake_partitions passes over
    -- the partitions of the claim that runs it).
    INSERT INTO {{schema}}.{{name "partition_timers"}} AS t (slot, at)
    SELECT f.slot, COALESCE(((SELECT locked FROM part_slots_of) -> f.partition_key ->> 4)::timestamptz,
                            statement_timestamp()
                            + ((SELECT m FROM part_of) -> f.partition_key ->> 3)::bigint * interval '1 microsecond')
    FROM (SELECT f.slot, f.partition_key FROM part_fit AS f
          WHERE NOT f.fits AND f.rated AND NOT f.too_costly AND f.slot IS NOT NULL AND NOT (SELECT yes FROM part_fast)
          UNION
          SELECT l.id, l.partition FROM part_left AS l WHERE l.rate_left <= 0) AS f
    ON CONFLICT (slot) DO UPDATE
    SET at = CASE WHEN t.at <= statement_timestamp() THEN EXCLUDED.at ELSE LEAST(t.at, EXCLUDED.at) END
), part_look AS (
    INSERT INTO {{schema}}.{{name "partition_releases"}} (slot, n)
    SELECT s.slot, 0
    -- part_woken is read here, first: wake_partitions runs in every claim
    -- while a partition limit is declared, whatever else it finds.
    FROM part_woken AS w
    CROSS JOIN LATERAL (
        -- The slots whose releases this claim counted, left with room,
        -- whose partitions keep rows set aside it does not take, and
        -- those of the rows it set aside.
        SELECT l.id AS slot FROM part_left AS l
        WHERE l.looked AND l.left_over > 0 AND (l.rate_left IS NULL OR l.rate_left > 0)
          AND w.ps IS NOT NULL
        UNION
        SELECT ((SELECT m FROM part_fits) -> a.id::text ->> 2)::bigint FROM set_aside AS a) AS s
    RETURNING pg_notify({{channel}}, '')
)`

// policyCTE says whether the claim's queue is fair or ages its rows
// (migration 22): two primary-key probes. The claim returns it with each
// row, so that the store runs the statement that keeps them (claimFair)
// only for such queues; see Store.claimFor.
const policyCTE = `policy AS (
    SELECT EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_weights"}} AS w WHERE w.queue = $5 AND w.partition = '')
        OR EXISTS (SELECT 1 FROM {{schema}}.{{name "queue_aging"}} AS a WHERE a.queue = $5) AS yes
)`

// readyPlainCTEs are readyCTEs for a queue neither fair nor aging: the
// rows in the queue's order, one range of the READY index per priority
// level, 0 first; each reads due rows only, so rows not yet due (retries
// backing off, events scheduled for later) cost nothing, whatever their
// priority.
const readyPlainCTEs = policyCTE + `, ready AS (
    SELECT r.id, r.kind, r.generation, p.level, r.next_attempt_at, r.key, r.partition_key, r.cost, 0::float8 AS vt
    FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
    CROSS JOIN LATERAL (
        SELECT id, kind, generation, next_attempt_at, key, partition_key, cost FROM {{table}}
        WHERE queue = $5 AND priority = p.level
          AND status = 'READY' AND next_attempt_at <= statement_timestamp()
          AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
          AND kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                 UNION ALL
                                 SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
          -- A keyed row is claimable once ordering has put it in line
          -- (key_seq, at its enqueue's commit): READY before that only to
          -- its own transaction, it may be behind its key's head.
          AND (key IS NULL OR key_seq IS NOT NULL)
          -- The caller's floor for the level ($6, microseconds from the
          -- epoch; 0 or none: from the oldest), a bound of the index range.
          AND next_attempt_at >= COALESCE(timestamptz 'epoch'
              + NULLIF(($6::bigint[])[p.level + 1], 0) * interval '1 microsecond', '-infinity')
        ORDER BY next_attempt_at, id
        LIMIT GREATEST((SELECT n FROM room) - (SELECT count(*) FROM expired), 0)
        FOR UPDATE SKIP LOCKED) AS r
    WHERE NOT (SELECT yes FROM paused)
    LIMIT GREATEST((SELECT n FROM room) - (SELECT count(*) FROM expired), 0)
)`

// readyCTEs read the queue's due READY rows (ready), each with its place
// in a fair queue's order (vt; 0 elsewhere). plain: the rows in the
// queue's order, one range of the READY index per priority level, 0
// first; each reads due rows only, so rows not yet due (retries backing
// off, events scheduled for later) cost nothing, whatever their
// priority. Under priority aging (migration 22, aging) a level reads too
// the rows of the level below it (one more) that have been due longer
// than the queue's threshold, which its own range leaves out.
//
// In a fair queue (fair), ready takes the rows of fair_read first: the
// due arrivals (fair_came) bring new partitions in at the queue's lowest
// pass (fair_now); the partitions furthest behind (fair_cand, as many as
// the claim wants) are filled like water (fair_level: the level t that
// the rows wanted raise the first m of them to, each by 1 / weight a
// row), and each gives its rows up to t (fair_read), each at its pass
// plus its rank over its weight. Rows of plain come after, in their
// order, as the rows of a partition just come (vt), when they have no
// partition or one fair_keys does not know; behind every fair row when
// their partition is known (a claim of some kinds only, whose partitions
// fair_cand left out, still takes work).
const readyCTEs = `` + policyCTE + `, fair AS (
    -- The queue's default weight, when it is fair: one probe.
    SELECT w.weight::float8 AS weight FROM {{schema}}.{{name "fair_weights"}} AS w
    WHERE w.queue = $5 AND w.partition = ''
), aging AS (
    SELECT (SELECT a.after_us FROM {{schema}}.{{name "queue_aging"}} AS a WHERE a.queue = $5) AS us
), wanted AS (
    SELECT GREATEST((SELECT n FROM room) - (SELECT count(*) FROM expired), 0) AS n
), plain AS (
    SELECT r.id, r.kind, r.generation, p.level, r.next_attempt_at, r.key, r.partition_key, r.cost
    FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
    CROSS JOIN LATERAL (
        SELECT u.* FROM (
            SELECT * FROM (SELECT id, kind, generation, next_attempt_at, key, partition_key, cost FROM {{table}}
             WHERE queue = $5 AND priority = p.level
               AND status = 'READY' AND next_attempt_at <= statement_timestamp()
               AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
               AND kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                      UNION ALL
                                      SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
               -- A keyed row is claimable once ordering has put it in line
               -- (key_seq, at its enqueue's commit): READY before that only to
               -- its own transaction, it may be behind its key's head.
               AND (key IS NULL OR key_seq IS NOT NULL)
               -- The caller's floor for the level ($6, microseconds from the
               -- epoch; 0 or none: from the oldest), a bound of the index range.
               AND next_attempt_at >= COALESCE(timestamptz 'epoch'
                   + NULLIF(($6::bigint[])[p.level + 1], 0) * interval '1 microsecond', '-infinity')
               -- Under aging, the rows of the level but 0 due longer than the
               -- threshold are the level above's.
               -- (later than now less the threshold: from a microsecond after).
               AND next_attempt_at >= CASE WHEN p.level = 0 OR (SELECT us FROM aging) IS NULL THEN timestamptz '-infinity'
                                           ELSE statement_timestamp() - ((SELECT us FROM aging) - 1) * interval '1 microsecond' END
             ORDER BY next_attempt_at, id
             LIMIT (SELECT n FROM wanted)
             FOR UPDATE SKIP LOCKED) AS own
            UNION ALL
            SELECT * FROM (SELECT id, kind, generation, next_attempt_at, key, partition_key, cost FROM {{table}}
             WHERE (SELECT us FROM aging) IS NOT NULL AND p.level < ` + maxPriorityText + `
               AND queue = $5 AND priority = p.level + 1
               AND status = 'READY'
               AND next_attempt_at <= statement_timestamp() - (SELECT us FROM aging) * interval '1 microsecond'
               AND (cardinality($2::text[]) = 0 OR kind = ANY($2::text[]))
               AND kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                      UNION ALL
                                      SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
               AND (key IS NULL OR key_seq IS NOT NULL)
               AND next_attempt_at >= COALESCE(timestamptz 'epoch'
                   + NULLIF(($6::bigint[])[p.level + 2], 0) * interval '1 microsecond', '-infinity')
             ORDER BY next_attempt_at, id
             LIMIT (SELECT n FROM wanted)
             FOR UPDATE SKIP LOCKED) AS aged) AS u
        ORDER BY u.next_attempt_at, u.id
        LIMIT (SELECT n FROM wanted)) AS r
    WHERE NOT (SELECT yes FROM paused)
    LIMIT (SELECT n FROM wanted)
), fair_came AS (
    DELETE FROM {{schema}}.{{name "fair_arrivals"}} AS a
    WHERE a.id = ANY (ARRAY(
        SELECT f.id FROM {{schema}}.{{name "fair_arrivals"}} AS f
        WHERE f.queue = $5 AND f.due_at <= statement_timestamp()
          AND EXISTS (SELECT 1 FROM fair) AND NOT (SELECT yes FROM paused)
        ORDER BY f.due_at
        LIMIT 1024
        FOR UPDATE SKIP LOCKED))
    RETURNING a.partition
), fair_now AS (
    -- The queue's virtual time: its lowest pass.
    SELECT COALESCE((SELECT k.pass FROM {{schema}}.{{name "fair_keys"}} AS k
                     WHERE k.queue = $5 AND EXISTS (SELECT 1 FROM fair)
                     ORDER BY k.pass LIMIT 1), 0) AS vt
), fair_cand AS (
    SELECT k.partition, k.pass + COALESCE((SELECT sum(d.pass) FROM {{schema}}.{{name "fair_debts"}} AS d
                                           WHERE d.queue = $5 AND d.partition = k.partition), 0) AS pass,
        false AS new
    FROM (SELECT k.partition, k.pass FROM {{schema}}.{{name "fair_keys"}} AS k
          WHERE k.queue = $5 AND EXISTS (SELECT 1 FROM fair) AND NOT (SELECT yes FROM paused)
          ORDER BY k.pass
          LIMIT (SELECT n FROM wanted)) AS k
    UNION ALL
    SELECT DISTINCT c.partition, (SELECT vt FROM fair_now), true FROM fair_came AS c
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_keys"}} AS k WHERE k.queue = $5 AND k.partition = c.partition)
), fair_fill AS (
    SELECT f.*, row_number() OVER o AS m, sum(f.w) OVER o AS sw, sum(f.w * f.pass) OVER o AS swp
    FROM (SELECT c.partition, c.pass, c.new,
              COALESCE((SELECT w.weight FROM {{schema}}.{{name "fair_weights"}} AS w
                        WHERE w.queue = $5 AND w.partition = c.partition), (SELECT weight FROM fair))::float8 AS w
          FROM fair_cand AS c) AS f
    WINDOW o AS (ORDER BY f.pass, f.partition)
), fair_level AS (
    -- The water level: of the prefixes of the partitions by pass, the
    -- longest whose level reaches its last partition's pass.
    SELECT f.m, ((SELECT n FROM wanted) + f.swp) / f.sw AS t FROM fair_fill AS f
    WHERE ((SELECT n FROM wanted) + f.swp) / f.sw >= f.pass
    ORDER BY f.m DESC
    LIMIT 1
), fair_read AS (
    SELECT r.id, r.kind, r.generation, r.level, r.next_attempt_at, r.key, r.partition_key, r.cost,
        f.pass + (row_number() OVER (PARTITION BY f.partition ORDER BY r.priority, r.next_attempt_at, r.id)) / f.w AS vt
    FROM fair_fill AS f
    CROSS JOIN fair_level AS l
    CROSS JOIN LATERAL (
        SELECT x.* FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
        CROSS JOIN LATERAL (
            SELECT e.id, e.kind, e.generation, e.priority, e.next_attempt_at, e.key, e.partition_key, e.cost,
                CASE WHEN e.priority > 0 AND e.next_attempt_at <= statement_timestamp() - (SELECT us FROM aging) * interval '1 microsecond'
                     THEN e.priority - 1 ELSE e.priority END AS level
            FROM {{table}} AS e
            WHERE e.queue = $5 AND e.partition_key = f.partition AND e.priority = p.level
              AND e.status = 'READY' AND e.next_attempt_at <= statement_timestamp()
              AND (cardinality($2::text[]) = 0 OR e.kind = ANY($2::text[]))
              AND e.kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                       UNION ALL
                                       SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
              AND (e.key IS NULL OR e.key_seq IS NOT NULL)
            ORDER BY e.next_attempt_at, e.id
            LIMIT LEAST(ceil((l.t - f.pass) * f.w)::bigint + 1, (SELECT n FROM wanted))
            FOR UPDATE SKIP LOCKED) AS x
        LIMIT LEAST(ceil((l.t - f.pass) * f.w)::bigint + 1, (SELECT n FROM wanted))) AS r
    -- A claim that wants no row (its queue's limit full) reads none.
    WHERE f.m <= l.m AND (SELECT n FROM wanted) > 0
), fair_short AS (
    -- What fair_read left short of the rows wanted (a partition had fewer
    -- rows than its share), and the rows it read of each partition.
    SELECT GREATEST((SELECT n FROM wanted) - (SELECT count(*) FROM fair_read), 0) AS n,
        COALESCE((SELECT jsonb_object_agg(x.partition_key, x.n)
                  FROM (SELECT partition_key, count(*) AS n FROM fair_read GROUP BY partition_key) AS x), '{}') AS got
), fair_more AS (
    -- The rest from the partitions that may have more (those fair_read
    -- read all their share of, and those past the level), in the order
    -- of their next row's place, one partition after another until
    -- enough: a claim takes as many rows as there are, as a claim of a
    -- queue that is not fair does.
    SELECT r.id, r.kind, r.generation, r.level, r.next_attempt_at, r.key, r.partition_key, r.cost, r.vt
    FROM (SELECT f.partition, f.pass, f.w, COALESCE((s.got ->> f.partition)::bigint, 0) AS got,
              CASE WHEN f.m <= l.m THEN LEAST(ceil((l.t - f.pass) * f.w)::bigint + 1, (SELECT n FROM wanted)) ELSE 0 END AS cap
          FROM fair_fill AS f
          CROSS JOIN fair_level AS l
          CROSS JOIN fair_short AS s
          WHERE s.n > 0
          ORDER BY f.pass + COALESCE((s.got ->> f.partition)::bigint, 0) / f.w, f.partition) AS k
    CROSS JOIN LATERAL (
        SELECT x.*, k.pass + (k.got + row_number() OVER (ORDER BY x.priority, x.next_attempt_at, x.id)) / k.w AS vt
        FROM (
            SELECT y.* FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
            CROSS JOIN LATERAL (
                SELECT e.id, e.kind, e.generation, e.priority, e.next_attempt_at, e.key, e.partition_key, e.cost,
                    CASE WHEN e.priority > 0 AND e.next_attempt_at <= statement_timestamp() - (SELECT us FROM aging) * interval '1 microsecond'
                         THEN e.priority - 1 ELSE e.priority END AS level
                FROM {{table}} AS e
                WHERE e.queue = $5 AND e.partition_key = k.partition AND e.priority = p.level
                  AND e.status = 'READY' AND e.next_attempt_at <= statement_timestamp()
                  AND (cardinality($2::text[]) = 0 OR e.kind = ANY($2::text[]))
                  AND e.kind <> ALL (ARRAY(SELECT name FROM usable WHERE scope = 'kind' AND n = 0
                                           UNION ALL
                                           SELECT name FROM rate_seen WHERE scope = 'kind' AND n = 0))
                  AND (e.key IS NULL OR e.key_seq IS NOT NULL)
                  AND e.id <> ALL (ARRAY(SELECT id FROM fair_read))
                ORDER BY e.next_attempt_at, e.id
                LIMIT (SELECT n FROM fair_short)
                FOR UPDATE SKIP LOCKED) AS y
            LIMIT (SELECT n FROM fair_short)) AS x) AS r
    WHERE k.got >= k.cap
    LIMIT (SELECT n FROM fair_short)
), ready AS (
    SELECT id, kind, generation, level, next_attempt_at, key, partition_key, cost, 0::float8 AS vt FROM plain
    WHERE NOT EXISTS (SELECT 1 FROM fair)
    UNION ALL
    SELECT * FROM (SELECT u.* FROM (
        SELECT id, kind, generation, level, next_attempt_at, key, partition_key, cost, vt FROM fair_read
        UNION ALL
        SELECT id, kind, generation, level, next_attempt_at, key, partition_key, cost, vt FROM fair_more
        UNION ALL
        SELECT p.id, p.kind, p.generation, p.level, p.next_attempt_at, p.key, p.partition_key, p.cost,
            CASE WHEN p.known THEN 'infinity'::float8
                 ELSE (SELECT vt FROM fair_now)
                      + (row_number() OVER (PARTITION BY p.known ORDER BY p.level, p.next_attempt_at, p.id)) / (SELECT weight FROM fair) END
        FROM (SELECT p.*,
                  p.partition_key IS NOT NULL
                  AND (p.partition_key IN (SELECT partition FROM fair_cand)
                       OR EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_keys"}} AS k
                                  WHERE k.queue = $5 AND k.partition = p.partition_key)) AS known
              FROM plain AS p
              WHERE p.id NOT IN (SELECT id FROM fair_read UNION ALL SELECT id FROM fair_more)) AS p) AS u
    WHERE EXISTS (SELECT 1 FROM fair)
    ORDER BY u.level, u.vt, u.next_attempt_at, u.id
    LIMIT (SELECT n FROM wanted)) AS f
)`

// fairTakingCTEs move the passes of a fair queue's partitions by the rows
// claimed of each (fair_took): each partition this claim can lock, SKIP
// LOCKED, with the debts left to it (fair_locked, fair_paid,
// fair_moved); a debt for each that another claim holds (fair_owed),
// which fair_cand counts in its pass until paid; a partition claimed
// first, or just come, added at the queue's lowest pass (fair_joined).
// No claim waits for another's partitions but to add a partition both
// add at once. They take out of fair_keys the
// partitions that fair_read read no row of and that have no due READY
// row, whatever its kind or its lock (fair_dry, fair_gone; one another
// claim holds is left), with an arrival when their next READY row is due
// (fair_later).
const fairTakingCTEs = `fair_took AS (
    SELECT t.partition, sum(t.n) AS n FROM (
        SELECT c.partition_key AS partition, count(*) AS n FROM chosen AS c
        WHERE c.part = 1 AND c.partition_key IS NOT NULL AND EXISTS (SELECT 1 FROM fair)
        GROUP BY c.partition_key
        UNION ALL
        SELECT f.partition, 0 FROM fair_cand AS f WHERE f.new) AS t
    GROUP BY t.partition
), fair_locked AS (
    -- The partitions claimed of that this claim can lock now; another
    -- claim holds the others, and is not waited for: a queue of one busy
    -- partition would have every claim wait for the one before.
    SELECT k.partition FROM {{schema}}.{{name "fair_keys"}} AS k
    WHERE k.queue = $5 AND k.partition = ANY (ARRAY(SELECT partition FROM fair_took WHERE n > 0))
    ORDER BY k.partition
    FOR UPDATE SKIP LOCKED
), fair_paid AS (
    -- Their debts, left by claims that could not lock them, paid now.
    DELETE FROM {{schema}}.{{name "fair_debts"}} AS d
    WHERE d.queue = $5 AND d.partition = ANY (ARRAY(SELECT partition FROM fair_locked))
    RETURNING d.partition, d.pass
), fair_moved AS (
    UPDATE {{schema}}.{{name "fair_keys"}} AS k
    -- Each looks its rows and its debts up in JSON objects made once (a
    -- binary search), not in the CTEs once per partition.
    SET pass = k.pass
        + COALESCE(((SELECT jsonb_object_agg(t.partition, t.n) FROM fair_took AS t) ->> k.partition)::float8, 0)
          / COALESCE((SELECT w.weight FROM {{schema}}.{{name "fair_weights"}} AS w
                      WHERE w.queue = $5 AND w.partition = k.partition), (SELECT weight FROM fair))
        + COALESCE(((SELECT jsonb_object_agg(p.partition, p.pass)
                     FROM (SELECT partition, sum(pass) AS pass FROM fair_paid GROUP BY partition) AS p) ->> k.partition)::float8, 0)
    WHERE k.queue = $5 AND k.partition = ANY (ARRAY(SELECT partition FROM fair_locked))
    RETURNING k.partition
), fair_owed AS (
    -- The passes of the partitions another claim holds, owed.
    INSERT INTO {{schema}}.{{name "fair_debts"}} (queue, partition, pass)
    SELECT $5, t.partition,
        t.n / COALESCE((SELECT w.weight FROM {{schema}}.{{name "fair_weights"}} AS w
                        WHERE w.queue = $5 AND w.partition = t.partition), (SELECT weight FROM fair))
    FROM fair_took AS t
    WHERE t.n > 0 AND t.partition NOT IN (SELECT partition FROM fair_locked)
      AND EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_keys"}} AS k WHERE k.queue = $5 AND k.partition = t.partition)
), fair_joined AS (
    -- The partitions new to fair_keys, at the queue's lowest pass and
    -- the rows claimed of them. One another claim adds meanwhile keeps
    -- its own pass.
    INSERT INTO {{schema}}.{{name "fair_keys"}} (queue, partition, pass)
    SELECT $5, t.partition, (SELECT vt FROM fair_now)
        + t.n / COALESCE((SELECT w.weight FROM {{schema}}.{{name "fair_weights"}} AS w
                          WHERE w.queue = $5 AND w.partition = t.partition), (SELECT weight FROM fair))
    FROM fair_took AS t
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "fair_keys"}} AS k WHERE k.queue = $5 AND k.partition = t.partition)
    ORDER BY t.partition
    ON CONFLICT (queue, partition) DO NOTHING
), fair_dry AS (
    SELECT f.partition, d.at FROM fair_fill AS f
    CROSS JOIN fair_level AS l
    CROSS JOIN LATERAL (
        SELECT min(x.at) AS at FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
        CROSS JOIN LATERAL (
            SELECT e.next_attempt_at AS at FROM {{table}} AS e
            WHERE e.queue = $5 AND e.partition_key = f.partition AND e.priority = p.level AND e.status = 'READY'
            ORDER BY e.next_attempt_at
            LIMIT 1) AS x) AS d
    WHERE f.m <= l.m AND NOT f.new AND (SELECT n FROM wanted) > 0
      AND NOT EXISTS (SELECT 1 FROM fair_read AS r WHERE r.partition_key = f.partition)
      AND NOT EXISTS (SELECT 1 FROM fair_more AS r WHERE r.partition_key = f.partition)
      AND (d.at IS NULL OR d.at > statement_timestamp())
), fair_gone AS (
    DELETE FROM {{schema}}.{{name "fair_keys"}} AS k
    WHERE k.queue = $5 AND k.partition = ANY (ARRAY(
        SELECT g.partition FROM {{schema}}.{{name "fair_keys"}} AS g
        WHERE g.queue = $5 AND g.partition = ANY (ARRAY(SELECT partition FROM fair_dry))
        ORDER BY g.partition
        FOR UPDATE SKIP LOCKED))
    RETURNING k.partition
), fair_forgiven AS (
    DELETE FROM {{schema}}.{{name "fair_debts"}} AS d
    WHERE d.queue = $5 AND d.partition = ANY (ARRAY(SELECT partition FROM fair_gone))
), fair_later AS (
    INSERT INTO {{schema}}.{{name "fair_arrivals"}} (queue, partition, due_at)
    SELECT $5, d.partition, d.at FROM fair_dry AS d
    WHERE d.at IS NOT NULL AND d.partition IN (SELECT partition FROM fair_gone)
)`

// maxPriorityText is MaxPriority in the claim's text.
const maxPriorityText = "9"

// insertEvents is the insert both enqueue paths end with: the rows of e
// (id, event_id, kind, key or the empty text, payload, max_attempts, run_at,
// queue, priority, metadata as JSON text or the empty text, n) with
// their row ids taken beforehand, in key order and, within a key, in the
// order given: the commit-time step of order per key then takes its keys'
// locks in one order in every call, so two enqueues of the same keys never
// deadlock.
const insertEvents = `
INSERT INTO {{table}} (id, event_id, kind, key, payload, max_attempts, next_attempt_at, queue, priority, metadata,
    partition_key, cost)
OVERRIDING SYSTEM VALUE
SELECT e.id, e.event_id, e.kind, NULLIF(e.key, ''), e.payload, e.max_attempts,
    COALESCE(NULLIF(e.run_at, '')::timestamptz, statement_timestamp()), e.queue, e.priority,
    NULLIF(e.metadata, '')::jsonb, NULLIF(e.partition_key, ''), e.cost
FROM `

const insertEventsEnd = ` AS e
ORDER BY e.key, e.n
RETURNING id, event_id`

// nextRowID takes the next value of the table's identity sequence. The
// sequence is looked up once a statement, cast to regclass in the same
// subquery: cast in nextval's argument, the name was looked up again for
// every row (3% of the server's time in a COPY of 5,000 events).
const nextRowID = `nextval((SELECT pg_get_serial_sequence({{tableText}}, 'id')::regclass))`

// enqueueSQL inserts events. Their row ids are taken from the table's
// identity sequence first, in insertion order, so that each event id goes
// into the event id table beside its row's id, whose primary key refuses a
// duplicate: the statement then fails as a whole.
const enqueueSQL = `
WITH input AS (
    SELECT e.*, ` + nextRowID + ` AS id
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], $6::text[], $7::text[], $8::smallint[],
        $9::text[], $10::text[], $11::integer[])
        WITH ORDINALITY AS e(event_id, kind, key, payload, max_attempts, run_at, queue, priority, metadata, partition_key,
            cost, n)
    ORDER BY e.key, e.n
), ids AS (
    INSERT INTO {{schema}}.{{name "event_ids"}} (event_id, id)
    SELECT event_id, id FROM input
)` + insertEvents + `input` + insertEventsEnd

// enqueueOneSQL inserts one event, the common call of a producer that
// writes one event beside its business row: the same row and the same
// event id as enqueueSQL, with scalar parameters ($1 to $9, in the order
// of columns.args) instead of arrays, and neither unnest nor sorts nor a
// look-up of the identity sequence. It costs less than enqueueSQL for one
// row (0.35–0.44 against 0.47–0.93 ms a statement at p50 in four runs,
// with the business insert's transaction open, through pgx on a busy
// two-core machine; docs/performance.md).
// The row takes its id from the table's identity; the event id goes
// into the event id table beside it, whose primary key refuses a
// duplicate, failing the statement as a whole. A row that a trigger of the
// caller's drops leaves no event id behind, so the statement returns no
// row and the enqueue reports the event missing.
const enqueueOneSQL = `
WITH e AS (
    INSERT INTO {{table}} (event_id, kind, key, payload, max_attempts, next_attempt_at, queue, priority, metadata,
        partition_key, cost)
    VALUES ($1::text, $2::text, NULLIF($3::text, ''), $4::bytea, $5::bigint,
        COALESCE(NULLIF($6::text, '')::timestamptz, statement_timestamp()), $7::text, $8::smallint, NULLIF($9::text, '')::jsonb,
        NULLIF($10::text, ''), $11::integer)
    RETURNING id, event_id
)
INSERT INTO {{schema}}.{{name "event_ids"}} (event_id, id)
SELECT e.event_id, e.id FROM e
RETURNING id, event_id`

// enqueueOneSkippingSQL inserts one event ($1 to $9, as enqueueOneSQL)
// unless its event id is taken: it takes a row id for the event id in the
// event id table, skipping an id already there (waiting, as any insert
// does, for a transaction that has just inserted it to end), and inserts
// the row with the id it took; an id taken returns no row. One statement
// where claimEventIDsSQL and insertClaimedSQL are two.
const enqueueOneSkippingSQL = `
WITH taken AS (
    INSERT INTO {{schema}}.{{name "event_ids"}} (event_id, id)
    VALUES ($1::text, ` + nextRowID + `)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id, id
)
INSERT INTO {{table}} (id, event_id, kind, key, payload, max_attempts, next_attempt_at, queue, priority, metadata,
    partition_key, cost)
OVERRIDING SYSTEM VALUE
SELECT t.id, t.event_id, $2::text, NULLIF($3::text, ''), $4::bytea, $5::bigint,
    COALESCE(NULLIF($6::text, '')::timestamptz, statement_timestamp()), $7::text, $8::smallint, NULLIF($9::text, '')::jsonb,
    NULLIF($10::text, ''), $11::integer
FROM taken AS t
RETURNING id, event_id`

// claimEventIDsSQL is the first step of an enqueue that skips duplicates:
// it takes a row id for each event id ($1, with its key $2, in the order of
// insertEvents) not in the event id table, and returns the ids it took; the
// ids already there are skipped.
const claimEventIDsSQL = `
INSERT INTO {{schema}}.{{name "event_ids"}} (event_id, id)
SELECT e.event_id, ` + nextRowID + `
FROM (SELECT e.event_id
      FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e(event_id, key, n)
      ORDER BY e.key, e.n) AS e
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id, id`

// insertClaimedSQL is the second step: it inserts the events whose event
// id the first step took, with the row ids it took.
const insertClaimedSQL = insertEvents + `(
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::text[],
        $8::text[], $9::smallint[], $10::text[], $11::text[], $12::integer[])
        WITH ORDINALITY AS u(id, event_id, kind, key, payload, max_attempts, run_at, queue, priority, metadata,
            partition_key, cost, n))` + insertEventsEnd

// existingSQL reads which of the event ids $1 are in the event id table,
// for an enqueue that skipped them as taken, with their row ids and whether
// the row exists (a trigger of the caller's that drops inserts leaves an id
// without one). An id not there was freed since it was skipped. The row is
// read by a scalar subquery through the primary key, which the planner
// never turns into a join (invariant 11).
const existingSQL = `SELECT x.event_id, x.id, (SELECT true FROM {{table}} AS o WHERE o.id = x.id) IS NOT NULL
FROM {{schema}}.{{name "event_ids"}} AS x
WHERE x.event_id = ANY ($1::text[])`

const completeSQL = `
WITH ` + lockedCTE + completeStep

const completeStep = `
UPDATE {{table}} AS o
SET status = 'DONE', lease_until = NULL, last_error = NULL,
    finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE ` + batchGuard + `
RETURNING o.id, o.generation, o.status`

// completeDeleteSQL completes claims of a table that keeps no history: the
// row is deleted instead of marked DONE, under the same guard. Each row
// passing the guard is named to the trigger that refuses to delete a keyed
// row under a live lease (migration 11) just before it is deleted, as
// "id:generation" in leasework.deleting: the owner's own deletion is its
// stop, not an operator's.
const completeDeleteSQL = `
WITH ` + lockedCTE + completeDeleteStep

const completeDeleteStep = `
DELETE FROM {{table}} AS o
WHERE ` + batchGuard + `
  AND set_config('leasework.deleting', o.id::text || ':' || o.generation::text, true) <> ''
RETURNING o.id, o.generation, 'DONE'::text AS status`

// passingKeysOn is a completion statement that passes on the keys of the
// rows it finished itself (migration 13): done, the completion's step as
// a CTE, returns each row's key too, and settle_keys, called once with
// all of them after every row is written (the aggregate reads done to its
// end first), makes each key's next event READY. The rows are locked by
// markingLockedCTE, which tells the release triggers, which would settle
// each keyed row with statements of their own at COMMIT, that nothing is
// left to them. passed is materialized:
// the function runs once, however the join rescans it. The store's own
// completions, which commit alone, are written so; a completion in a
// caller's transaction ([Store.WriteTx]) is left to the triggers, which
// see everything that transaction finished.
func passingKeysOn(step string) string {
	return `
WITH ` + markingLockedCTE + `, done AS (` + step + doneColumns + `),
passed AS MATERIALIZED (SELECT {{schema}}.{{name "settle_keys"}}(array_agg(k.key)) FROM done AS k)` + givingPlacesBack("") + `
SELECT d.id, d.generation, d.status FROM done AS d, passed, woken`
}

// takingTurns is passingKeysOn for a worker that takes the turns it
// passes on (migration 15, [Store.WriteManyTakingTurns]): take_turns
// passes on the keys of the rows done finished, by settle_keys' rule under
// its locks, and claims for the worker, in the same write, those of the
// keys' next events a claim of queue $3 by it could take now, $4 at most
// (kinds $5, lease $6 in microseconds, owner $7); the others become READY.
// Its argument reads done to its end first, so it runs after every row is
// written. It also hands the places the rows done held under concurrency
// limits on to the next due rows of queue $3 (handingOn), up to $4 with
// the turns taken, and gives back the others. Each row returned says
// whether it is a claim (the first column): a finished row's id,
// generation and status follow, or a claim's columns in the claim
// statement's order, from the id on.
func takingTurns(step string) string {
	return `
WITH ` + markingLockedCTE + `, done AS (` + step + doneColumns + `),
taken AS MATERIALIZED (
    SELECT t.* FROM {{schema}}.{{name "take_turns"}}((SELECT array_agg(d.key) FROM done AS d),
        $3, $4, $5::text[], $6, $7) AS t)` + handingOn + givingPlacesBack(placesHandedOn) + `
SELECT false, d.id, d.generation, d.status, NULL::text, NULL::text, NULL::text, NULL::bytea, NULL::integer,
    NULL::integer, NULL::timestamptz, NULL::bytea, NULL::text, NULL::text, NULL::smallint, NULL::timestamptz,
    NULL::text, NULL::integer, NULL::text
FROM done AS d, woken
UNION ALL
SELECT true, t.id, t.generation, t.status, t.event_id, t.kind, COALESCE(t.key, ''), t.payload, t.attempt,
    t.max_attempts, t.lease_until, t.progress, COALESCE(t.last_error, ''), t.queue, t.priority, t.next_attempt_at,
    COALESCE(t.metadata::text, ''), t.snoozes, COALESCE(t.steps::text, '')
FROM taken AS t
UNION ALL
SELECT true, h.id, h.generation, h.status, h.event_id, h.kind, COALESCE(h.key, ''), h.payload, h.attempt,
    h.max_attempts, h.lease_until, h.progress, COALESCE(h.last_error, ''), h.queue, h.priority, h.next_attempt_at,
    COALESCE(h.metadata::text, ''), h.snoozes, COALESCE(h.steps::text, '')
FROM handed AS h`
}

// handingOn are the CTEs of a completion taking turns that hand the
// places its rows held under concurrency limits (migration 17) to the
// next rows a claim of queue $3 by the worker would take, claimed in the
// same statement: a place given back and taken again in one commit is
// never idle, and counts nothing new (the slot's count stays; the row
// taking it names the slot). freed: the places of the rows done, under
// the limits of queue $3 and of the kinds claimed, in slots within their
// share (a lowered limit's excess is given back, not handed on). next:
// the due READY rows of queue $3 as the claim reads them, of kinds with a
// place freed or no limit, $4 at most with the turns taken, each locked
// SKIP LOCKED. A row is handed on when every limit over it has a place
// freed for it, and some limit is over it; the i-th row of a kind takes
// the i-th place of its kind's limit freed, the i-th row handed the i-th
// of the queue's.
const handingOn = `, freed AS (
    SELECT x.scope, x.name, x.key, row_number() OVER (PARTITION BY x.scope, x.name ORDER BY x.key, x.id) AS pos
    FROM (SELECT 'kind' AS scope, d.kind AS name, d.kind_slot AS key, d.id FROM done AS d WHERE d.kind_slot IS NOT NULL
          UNION ALL
          SELECT 'queue', d.queue, d.queue_slot, d.id FROM done AS d WHERE d.queue_slot IS NOT NULL) AS x
    JOIN {{schema}}.{{name "limits"}} AS l ON l.scope = x.scope AND l.name = x.name
        AND x.key >= l.id::bigint * 100000 AND x.key < l.id::bigint * 100000 + ` + limitSlots + `
    JOIN {{schema}}.{{name "limit_slots"}} AS s ON s.key = x.key AND s.used <= s.cap
    WHERE (x.scope = 'kind' AND (cardinality($5::text[]) = 0 OR x.name = ANY ($5::text[])))
       OR (x.scope = 'queue' AND x.name = $3)
), over AS (
    -- The limits of queue $3 and of the kinds claimed.
    SELECT l.scope, l.name FROM {{schema}}.{{name "limits"}} AS l
    WHERE (l.scope = 'queue' AND l.name = $3)
       OR (l.scope = 'kind' AND (cardinality($5::text[]) = 0 OR l.name = ANY ($5::text[])))
), next AS (
    SELECT r.id, r.kind, p.level, r.next_attempt_at FROM generate_series(0, ` + maxPriorityText + `) AS p(level)
    CROSS JOIN LATERAL (
        SELECT id, kind, next_attempt_at FROM {{table}}
        WHERE queue = $3 AND priority = p.level
          AND status = 'READY' AND next_attempt_at <= statement_timestamp()
          AND (cardinality($5::text[]) = 0 OR kind = ANY ($5::text[]))
          AND (kind = ANY (ARRAY(SELECT name FROM freed WHERE scope = 'kind'))
               OR kind <> ALL (ARRAY(SELECT name FROM over WHERE scope = 'kind')))
          AND (key IS NULL OR key_seq IS NOT NULL)
          -- A partition limit's place is taken by a claim only, and a
          -- rate limit's starts.
          AND (partition_key IS NULL OR NOT ` + anyPartitionLimit + `)
          AND kind <> ALL (ARRAY(SELECT l.name FROM {{schema}}.{{name "rate_limits"}} AS l WHERE l.scope = 'kind'))
          -- A bound of the index range the planner cannot see through,
          -- as the claim's floor: without one, a generic plan read the
          -- whole table once per level when its statistics counted many
          -- rows READY (130 ms a completion at 50,000 rows).
          AND next_attempt_at >= (SELECT timestamptz '-infinity')
        ORDER BY next_attempt_at, id
        LIMIT GREATEST($4 - (SELECT count(*) FROM taken), 0)
        FOR UPDATE SKIP LOCKED) AS r
    WHERE EXISTS (SELECT 1 FROM freed)
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "queues"}} AS q WHERE q.queue = $3)
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.{{name "rate_limits"}} AS l WHERE l.scope = 'queue' AND l.name = $3)
    LIMIT GREATEST($4 - (SELECT count(*) FROM taken), 0)
), in_kind AS (
    SELECT n.*, row_number() OVER (PARTITION BY n.kind ORDER BY n.level, n.next_attempt_at, n.id) AS i,
        EXISTS (SELECT 1 FROM over AS o WHERE o.scope = 'kind' AND o.name = n.kind) AS kind_limited
    FROM next AS n
), by_kind AS (
    SELECT k.*, row_number() OVER (ORDER BY k.level, k.next_attempt_at, k.id) AS j
    FROM in_kind AS k
    WHERE NOT k.kind_limited
       OR k.i <= (SELECT count(*) FROM freed AS f WHERE f.scope = 'kind' AND f.name = k.kind)
), handing AS (
    SELECT b.id,
        (SELECT f.key FROM freed AS f WHERE f.scope = 'kind' AND f.name = b.kind AND f.pos = b.i AND b.kind_limited) AS kind_slot,
        (SELECT f.key FROM freed AS f WHERE f.scope = 'queue' AND f.pos = b.j) AS queue_slot
    FROM by_kind AS b
    WHERE (b.kind_limited OR EXISTS (SELECT 1 FROM over WHERE scope = 'queue'))
      AND (NOT EXISTS (SELECT 1 FROM over WHERE scope = 'queue')
           OR b.j <= (SELECT count(*) FROM freed AS f WHERE f.scope = 'queue'))
), handed AS (
    UPDATE {{table}} AS o
    SET status = 'INPROGRESS',
        generation = ` + nextGeneration + `,
        attempt = o.attempt + 1,
        lease_until = statement_timestamp() + $6 * interval '1 microsecond',
        worker = NULLIF($7, ''),
        kind_slot = ((SELECT jsonb_object_agg(h.id::text, jsonb_build_array(h.kind_slot, h.queue_slot)) FROM handing AS h)
                     -> o.id::text ->> 0)::bigint,
        queue_slot = ((SELECT jsonb_object_agg(h.id::text, jsonb_build_array(h.kind_slot, h.queue_slot)) FROM handing AS h)
                      -> o.id::text ->> 1)::bigint,
        updated_at = statement_timestamp()
    WHERE o.id = ANY (ARRAY(SELECT id FROM handing)) AND o.status = 'READY' COLLATE "C"
    RETURNING o.*
)`

// placesHandedOn are, for givingPlacesBack, the places a completion
// handed on (handingOn): each slot gets back the places of the rows done,
// less those.
const placesHandedOn = `
                                 UNION ALL
                                 SELECT kind_slot, -1 FROM handed WHERE kind_slot IS NOT NULL
                                 UNION ALL
                                 SELECT queue_slot, -1 FROM handed WHERE queue_slot IS NOT NULL`

// retrySQL sends a claim back to READY after a delay, unless the attempt
// budget is spent, in which case the row ends FAILED with the error. Each
// claim's entry of $2 is [generation, delay in microseconds, error,
// snooze]: a snooze (1) adds one to the budget first, so it never spends
// it, and is counted in snoozes, so it is never taken for a failure.
const retrySQL = `
WITH ` + lockedCTE + `
UPDATE {{table}} AS o
SET status = CASE WHEN o.attempt >= o.max_attempts + ` + snoozed + ` THEN 'FAILED' ELSE 'READY' END,
    max_attempts = o.max_attempts + ` + snoozed + `,
    snoozes = o.snoozes + ` + snoozed + `,
    lease_until = NULL, last_error = ` + rowValue + ` ->> 2,
    worker = CASE WHEN o.attempt >= o.max_attempts + ` + snoozed + ` THEN o.worker END,
    next_attempt_at = statement_timestamp() + (` + rowValue + ` ->> 1)::bigint * interval '1 microsecond',
    finished_at = CASE WHEN o.attempt >= o.max_attempts + ` + snoozed + ` THEN statement_timestamp() END,
    updated_at = statement_timestamp()
WHERE ` + batchGuard + `
RETURNING o.id, o.generation, o.status`

// snoozed is a retry's snooze flag: 1 or 0 (an entry without one: 0).
const snoozed = `COALESCE((` + rowValue + ` ->> 3)::int, 0)`

// failSQL ends claims FAILED; each claim's entry of $2 is [generation,
// reason].
const failSQL = `
WITH ` + lockedCTE + `
UPDATE {{table}} AS o
SET status = 'FAILED', lease_until = NULL, last_error = ` + rowValue + ` ->> 1,
    finished_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE ` + batchGuard + `
RETURNING o.id, o.generation, o.status`

// renewSQL renews claims. Unlike the other guarded writes it never waits
// for a row lock: a row locked by another transaction (a handler completing
// its claim in its own transaction holds the lock until it commits) is
// skipped, so an open handler transaction never holds up the renewal of the
// other claims in the batch (invariant 13). A skipped row whose last
// committed version still passes the guard is returned as busy (the last
// column): neither renewed nor lost. Both parts read the rows through the
// primary key, the second only the rows the first did not lock (usually
// none), so a renewal reads each of its rows once.
const renewSQL = `
WITH ` + lockStep + ` SKIP LOCKED
), renewed AS (
    UPDATE {{table}} AS o
    SET lease_until = statement_timestamp() + $3 * interval '1 microsecond',
        updated_at = statement_timestamp()
    WHERE ` + batchGuard + `
    RETURNING o.id, o.generation, o.lease_until
)
SELECT id, generation, lease_until, false FROM renewed
UNION ALL
SELECT o.id, o.generation, o.lease_until, true
FROM {{table}} AS o
WHERE o.id = ANY (ARRAY(SELECT unnest($1::bigint[]) EXCEPT SELECT id FROM locked))
  AND ` + ownedPerRow

// releaseSQL gives a claim back at once, for graceful shutdown. The attempt
// it consumed is given back too: the handler was stopped, it did not fail.
// Idle workers are woken on the table's channel ($3), one notification per
// kind.
const releaseSQL = `
WITH ` + lockedCTE + `, released AS (
    UPDATE {{table}} AS o
    SET status = 'READY', lease_until = NULL, worker = NULL,
        attempt = greatest(o.attempt - 1, 0),
        next_attempt_at = statement_timestamp(), updated_at = statement_timestamp()
    WHERE ` + batchGuard + `
    RETURNING o.id, o.generation, o.status, o.kind
)
SELECT r.id, r.generation, r.status FROM released AS r, pg_notify($3, r.kind)`

const progressSQL = `
UPDATE {{table}} AS o
SET progress = $3, updated_at = statement_timestamp()
FROM (SELECT $1::bigint AS id, $2::bigint AS generation) AS r
WHERE ` + guard + `
RETURNING o.id`

// stepSQL records steps, a batch of them: each row's step (its name and
// its result in base64, the values of $2) with the generation of the claim
// that records it and when (migration 26), under the guard. A batch has
// one step a row: a handler records its steps one after another.
const stepSQL = `
WITH ` + lockedCTE + `
UPDATE {{table}} AS o
SET steps = COALESCE(o.steps, '{}'::jsonb)
        || jsonb_build_object(` + rowValue + ` ->> 1,
                              jsonb_build_object('g', o.generation, 'at', statement_timestamp(), 'v', ` + rowValue + ` ->> 2)),
    updated_at = statement_timestamp()
WHERE ` + batchGuard + `
RETURNING o.id, o.generation, o.status`

// outputSQL records the claim's output ($3), under the guard.
const outputSQL = `
UPDATE {{table}} AS o
SET output = $3, updated_at = statement_timestamp()
FROM (SELECT $1::bigint AS id, $2::bigint AS generation) AS r
WHERE ` + guard + `
RETURNING o.id`

// requeueSQL is the repair path: FAILED rows back to READY, those of the
// kinds $1, or all of them when $4 is true, read from the FAILED index.
// The generation grows here too, so an owner from before the requeue stays
// stale. Idle workers are woken on the table's channel ($3). $2 is the
// extra attempts (see RequeueRequest): a requeue that resets the attempts
// ($2 = 0) gives back the budget as it was before its snoozes grew it, and
// the snooze count starts again with the attempt count.
var requeueSQL = `
WITH requeued AS (
    UPDATE {{table}} AS o` + requeueSet + `
    WHERE o.status = 'FAILED' AND ($4 OR o.kind = ANY($1::text[]))
    RETURNING o.id, o.kind
)
SELECT r.id FROM requeued AS r, pg_notify($3, r.kind) ORDER BY r.id`

// requeueByIDSQL is requeueSQL for the rows named by the id array $1, read
// through the primary key whatever the plan (invariant 11): one statement
// for both, an OR of the ids and the kinds, read every FAILED row under a
// generic plan to requeue one id. The status check's collation keeps the
// planner from combining the primary key with the FAILED index, as in the
// guard (see inProgress).
var requeueByIDSQL = `
WITH requeued AS (
    UPDATE {{table}} AS o` + requeueSet + `
    WHERE o.id = ANY ($1::bigint[]) AND o.status = 'FAILED' COLLATE "C"
    RETURNING o.id, o.kind
)
SELECT r.id FROM requeued AS r, pg_notify($3, r.kind) ORDER BY r.id`

// requeueSet is what a requeue writes, $2 being its extra attempts.
var requeueSet = requeueSetOf("$2")

// requeueSetOf is what a requeue writes, extra being the parameter of its
// extra attempts: a requeue that resets the attempts (extra = 0) gives
// back the budget as it was before its snoozes grew it, and the snooze
// count starts again with the attempt count.
func requeueSetOf(extra string) string {
	return `
    SET status = 'READY', generation = ` + nextGeneration + `, lease_until = NULL, worker = NULL,
        attempt = CASE WHEN ` + extra + ` = 0 THEN 0 ELSE o.attempt END,
        max_attempts = CASE WHEN ` + extra + ` = 0 THEN greatest(o.max_attempts - o.snoozes, 1) ELSE o.attempt + ` + extra + ` END,
        snoozes = CASE WHEN ` + extra + ` = 0 THEN 0 ELSE o.snoozes END,
        next_attempt_at = statement_timestamp(), finished_at = NULL,
        updated_at = statement_timestamp()`
}

// requeueRefsSQL requeues the rows named by $1 (ids) and $2 (as in
// batchGuard: the generation each was seen FAILED at), each only if it is
// FAILED at that generation still, read through the primary key; $4 is
// its ExtraAttempts, $3 the channel.
var requeueRefsSQL = `
WITH requeued AS (
    UPDATE {{table}} AS o` + requeueSetOf("$4") + `
    WHERE o.id = ANY ($1::bigint[]) AND o.status = 'FAILED' COLLATE "C"
      AND o.generation = (` + rowValue + ` ->> 0)::bigint
    RETURNING o.id, o.kind
)
SELECT r.id FROM requeued AS r, pg_notify($3, r.kind) ORDER BY r.id`

// statsSQL counts the rows of each status of leasework.Statuses, in that
// order, then the figures of [Stats] after them.
var statsSQL = `
SELECT` + statusCounts() + `
    count(*) FILTER (WHERE status = 'FAILED' AND key IS NOT NULL),
    count(*) FILTER (WHERE status = 'READY' AND next_attempt_at <= statement_timestamp()),
    count(*) FILTER (WHERE status = 'INPROGRESS' AND lease_until <= statement_timestamp()),
    COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - LEAST(
        min(next_attempt_at) FILTER (WHERE status = 'READY' AND next_attempt_at <= statement_timestamp()),
        min(lease_until) FILTER (WHERE status = 'INPROGRESS' AND lease_until <= statement_timestamp())
    )), 0)::float8
FROM {{table}}`

const rowColumns = `id, event_id, kind, COALESCE(key, ''), payload, status, generation, attempt,
    max_attempts, lease_until, next_attempt_at, COALESCE(last_error, ''), progress,
    COALESCE(worker, ''), created_at, updated_at, finished_at, queue, priority, COALESCE(metadata::text, ''), snoozes,
    cancelled_at, COALESCE(partition_key, ''), cost`

// rejectedSQL reads the rows whose guarded write was rejected, to tell a
// write already recorded by the same claim, and a deleted row, from a stale
// one.
const rejectedSQL = `SELECT id, status, generation, COALESCE(last_error, ''), cancelled_at IS NOT NULL
FROM {{table}} WHERE id = ANY ($1::bigint[])`

// rowWholeColumns are rowColumns with what one row's page shows besides:
// its steps and output (migration 26), which a list leaves out.
const rowWholeColumns = rowColumns + `, COALESCE(steps::text, ''), output`

const getSQL = `SELECT ` + rowWholeColumns + ` FROM {{table}} WHERE id = $1`

const getByEventSQL = `SELECT ` + rowWholeColumns + ` FROM {{table}}
WHERE id = (SELECT id FROM {{schema}}.{{name "event_ids"}} WHERE event_id = $1)`

const listSQL = `SELECT ` + rowColumns + ` FROM {{table}}
WHERE ($1 = '' OR status = $1) AND ($2 = '' OR kind = $2) AND ($5 = '' OR queue = $5)
  AND ($6 = '' OR partition_key = $6) AND id > $3
ORDER BY id
LIMIT $4`

// deleteFinishedSQL is retention: it picks the oldest finished rows, DONE
// ones (unless $3 is false) from the DONE index and DISCARDED ones from
// theirs, and deletes them named by an id array, so the delete is a
// primary-key scan whatever the planner estimates for the subquery
// (invariant 11), as in the claim. A trigger forgets their event ids.
const deleteFinishedSQL = `
DELETE FROM {{table}}
WHERE id = ANY (ARRAY(
    SELECT f.id FROM (
        SELECT d.id, d.finished_at FROM (
            SELECT id, finished_at FROM {{table}}
            WHERE status = 'DONE' AND $3 AND finished_at <= statement_timestamp() - $1 * interval '1 microsecond'
            ORDER BY finished_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED) AS d
        UNION ALL
        SELECT x.id, x.finished_at FROM (
            SELECT id, finished_at FROM {{table}}
            WHERE status = 'DISCARDED' AND finished_at <= statement_timestamp() - $1 * interval '1 microsecond'
            ORDER BY finished_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED) AS x) AS f
    ORDER BY f.finished_at
    LIMIT $2))`

// nextWakeSQL reads, in seconds from now by the database clock, when a row
// of queue $1 next becomes claimable without a notification: the earliest
// lease still running expires, or the earliest READY row not yet due comes
// due (a retry, a snooze, an event enqueued to run later), or a rate limit
// has room again for a row it holds back; NULL when none is ahead. It
// reads one entry of the lease index and one entry of the ready index per
// priority level, whatever the number of claims in flight, the backlog, or
// who holds them: a lease already expired and a row already due are left
// to the claim, and a row this worker does not serve costs it one empty
// claim at most. The lease read starts at the
// caller's floor $2 (microseconds from the epoch; 0: now) when that is
// later than now, a bound of the index range: every row claimed and
// finished in the last lease period leaves an entry ahead of now there,
// which vacuum cannot remove while the horizon is pinned. The second
// column is the lease found, for the caller's next floor.
//
// A rate limit over the queue's rows (the queue's own, or a kind's) wakes
// the worker when its room, the starts its shares allow less those in the
// window that ends now, reaches what it holds back: the cost of a due row
// at the head of a priority level of the queue under it (heads: one more
// entry of the ready index per level, read only while a rate limit is
// declared), the least of those that do not fit, or one start while it is
// full. Its room grows by one as each start leaves the window, a period
// after it was made: it reaches n when the (n - room)-th oldest start in
// the window leaves it (a share past a lowered cap gains nothing then: the
// wake is early, and costs an empty claim). A row that costs more than
// the limit's Max never fits, and wakes no one.
const nextWakeSQL = `
WITH heads AS MATERIALIZED (
    SELECT h.kind, h.cost FROM generate_series(0, ` + maxPriorityText + `) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT kind, cost FROM {{table}}
        WHERE queue = $1 AND status = 'READY' AND priority = p.priority
          AND next_attempt_at <= statement_timestamp()
        ORDER BY next_attempt_at
        LIMIT 1) AS h
)
SELECT EXTRACT(EPOCH FROM LEAST(l.lease_until,
    (SELECT min(r.next_attempt_at)
     FROM generate_series(0, 9) AS p(priority)
     CROSS JOIN LATERAL (
         SELECT next_attempt_at FROM {{table}}
         WHERE queue = $1 AND status = 'READY' AND priority = p.priority
           AND next_attempt_at > statement_timestamp()
         ORDER BY next_attempt_at
         LIMIT 1) AS r),
    -- A partition's rate limit has room again for rows it set aside
    -- (migration 24): the earliest timer, of any queue's partitions
    -- (the claim that finds it due brings them back, in whatever queue).
    (SELECT t.at FROM {{schema}}.{{name "partition_timers"}} AS t ORDER BY t.at LIMIT 1),
    (SELECT min(w.at) FROM {{schema}}.{{name "rate_limits"}} AS rl
     CROSS JOIN LATERAL (SELECT rl.period_us * interval '1 microsecond' AS period,
                                rl.id::bigint * 100000 AS first, rl.id::bigint * 100000 + ` + limitSlots + ` - 1 AS last) AS k
     CROSS JOIN LATERAL (
         SELECT COALESCE(sum(GREATEST(s.cap - (SELECT count(*) FROM unnest(s.starts) AS t
                                               WHERE t > statement_timestamp() - k.period), 0)), 0) AS room
         FROM {{schema}}.{{name "rate_shares"}} AS s
         WHERE s.key BETWEEN k.first AND k.last) AS r
     CROSS JOIN LATERAL (
         SELECT COALESCE(min(h.cost) FILTER (WHERE h.cost > r.room), CASE WHEN r.room = 0 THEN 1 END) AS need
         FROM heads AS h
         WHERE rl.scope = 'queue' OR h.kind = rl.name) AS n
     CROSS JOIN LATERAL (
         SELECT x.t + k.period AS at
         FROM (SELECT t FROM {{schema}}.{{name "rate_shares"}} AS s
               CROSS JOIN LATERAL unnest(s.starts) AS t
               WHERE s.key BETWEEN k.first AND k.last AND t > statement_timestamp() - k.period) AS x
         ORDER BY x.t
         OFFSET n.need - r.room - 1
         LIMIT 1) AS w
     WHERE ((rl.scope = 'queue' AND rl.name = $1) OR (rl.scope = 'kind' AND rl.name >= ''))
       AND n.need IS NOT NULL)
    ) - statement_timestamp())::float8,
    COALESCE((EXTRACT(EPOCH FROM l.lease_until) * 1000000)::bigint, 0)
FROM (SELECT (
    SELECT lease_until FROM {{table}}
    WHERE queue = $1 AND status = 'INPROGRESS'
      AND lease_until > statement_timestamp()
      AND lease_until >= timestamptz 'epoch' + $2::bigint * interval '1 microsecond'
    ORDER BY lease_until
    LIMIT 1) AS lease_until) AS l`

type queries struct {
	claim, claimFair, enqueue, enqueueOne, enqueueOneSkip, claimEventIDs, insertClaimed, existing, complete, completeDelete, completeTx, completeDeleteTx,
	completeTaking, completeDeleteTaking,
	retry, fail, renew, release, progress, step, output,
	requeue, requeueByID, stats, rejected, get, getByEvent, list, deleteFinished, nextWake,
	discard, heldKeys, keyHead, pause, resume, queues, cancel, stop, requeueRefs string
	setLimit, shares, clearLimit, limits, limitChanges      string
	setPartitionLimit, clearPartitionLimit, partitionLimits string
	setRateLimit, rateShares, clearRateLimit, rateLimits    string
	setPartitionRate, clearPartitionRate, partitionRates    string
}

func (s *Store) renderQueries() queries {
	q := queries{
		claim:                s.render(claimPlainSQL),
		claimFair:            s.render(claimSQL),
		enqueue:              s.render(enqueueSQL),
		enqueueOne:           s.render(enqueueOneSQL),
		enqueueOneSkip:       s.render(enqueueOneSkippingSQL),
		claimEventIDs:        s.render(claimEventIDsSQL),
		insertClaimed:        s.render(insertClaimedSQL),
		existing:             s.render(existingSQL),
		complete:             s.render(passingKeysOn(completeStep)),
		completeDelete:       s.render(passingKeysOn(completeDeleteStep)),
		completeTx:           s.render(completeSQL),
		completeDeleteTx:     s.render(completeDeleteSQL),
		retry:                s.render(retrySQL),
		fail:                 s.render(failSQL),
		renew:                s.render(renewSQL),
		release:              s.render(releaseSQL),
		progress:             s.render(progressSQL),
		step:                 s.render(stepSQL),
		output:               s.render(outputSQL),
		requeue:              s.render(requeueSQL),
		requeueByID:          s.render(requeueByIDSQL),
		stats:                s.render(statsSQL),
		rejected:             s.render(rejectedSQL),
		get:                  s.render(getSQL),
		getByEvent:           s.render(getByEventSQL),
		list:                 s.render(listSQL),
		deleteFinished:       s.render(deleteFinishedSQL),
		nextWake:             s.render(nextWakeSQL),
		discard:              s.render(discardSQL),
		heldKeys:             s.render(heldKeysSQL),
		keyHead:              s.render(keyHeadSQL),
		pause:                s.render(pauseSQL),
		resume:               s.render(resumeSQL),
		queues:               s.render(queuesSQL),
		setLimit:             s.render(setLimitSQL),
		shares:               s.render(sharesSQL),
		clearLimit:           s.render(clearLimitSQL),
		limits:               s.render(limitsSQL),
		limitChanges:         s.render(limitChangesSQL),
		setPartitionLimit:    s.render(setPartitionLimitSQL),
		clearPartitionLimit:  s.render(clearPartitionLimitSQL),
		partitionLimits:      s.render(partitionLimitsSQL),
		setRateLimit:         s.render(setRateLimitSQL),
		rateShares:           s.render(rateSharesSQL),
		clearRateLimit:       s.render(clearRateLimitSQL),
		rateLimits:           s.render(rateLimitsSQL),
		setPartitionRate:     s.render(setPartitionRateSQL),
		clearPartitionRate:   s.render(clearPartitionRateSQL),
		partitionRates:       s.render(partitionRatesSQL),
		cancel:               s.render(cancelSQL),
		stop:                 s.render(stopSQL),
		requeueRefs:          s.render(requeueRefsSQL),
		completeTaking:       s.render(takingTurns(completeStep)),
		completeDeleteTaking: s.render(takingTurns(completeDeleteStep)),
	}
	breakQueries(&q) // a no-op but in the chaos soak's deliberately broken builds (breaks_off.go)
	return q
}

// statusCounts is a select list's count of each status of
// leasework.Statuses, in that order, each followed by a comma.
func statusCounts() string {
	var b strings.Builder
	for _, st := range leasework.Statuses() {
		fmt.Fprintf(&b, "\n    count(*) FILTER (WHERE status = '%s'),", st)
	}
	return b.String()
}
