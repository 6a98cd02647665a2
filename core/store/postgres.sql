-- The statements only the PostgreSQL store runs this way, by name; each one has a namesake
-- in sqlite.sql. Parameters are %(named)s (psycopg), and a literal % is written %%.
-- Everything both stores run alike is in shared.sql: a new statement goes there unless its
-- SQL must differ between the two dialects (then here and in sqlite.sql, under the same
-- name). A name defined here and in shared.sql is refused.
-- Times are bigint seconds passed in by the caller: no statement reads NOW().

-- name: create_migrations_table
-- The migration record, created before the first migration runs.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: migration_lock
-- One migrator at a time: a transaction-scoped advisory lock, so hosts starting together migrate once.
SELECT pg_advisory_xact_lock(7311995);

-- name: record_migration
-- Record a migration, in the migration's own transaction.
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: insert_events
-- The one way an event enters the inbox (base.insert_events): store each delivery unless its
-- (source, source_id) key exists, the first copy in a batch winning; the new rows' ids with
-- their keys. The VALUES row is repeated once per event of a batch (Tx.many). `trace`: the
-- traceparent of the span that stored it (NULL: not traced). Each new row also wakes idle
-- workers on every host (LISTEN wakeful_work), at commit.
WITH stored AS (
    INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at, waiting_since,
                        trace)
    VALUES (%(inbox)s, %(source)s, %(source_id)s, %(payload)s, %(now)s, %(now)s, %(waiting)s,
            %(trace)s)
    ON CONFLICT (source, source_id) DO NOTHING
    RETURNING id, inbox, source, source_id
)
SELECT id, source, source_id, pg_notify('wakeful_work', inbox) AS woke FROM stored;

-- name: get_lease_for_update
-- The lease row, locked for the write that follows.
SELECT * FROM leases WHERE inbox = %(inbox)s FOR UPDATE;

-- name: get_lease_for_acquire
-- The lease row, locked; one another transaction holds is skipped.
-- A worker pool must not queue behind each other: a lease row another transaction is
-- working on is skipped, and the acquire is refused as if held.
SELECT * FROM leases WHERE inbox = %(inbox)s FOR UPDATE SKIP LOCKED;

-- name: due_timers
-- Timers due now, oldest first, a page at a time.
SELECT * FROM timers WHERE next_at <= %(now)s ORDER BY next_at, id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: get_approval_for_update
-- An approval, locked for the answer that follows.
SELECT * FROM approvals WHERE id = %(id)s FOR UPDATE;

-- name: listen_work
-- Wake on every event any host stores (insert_events notifies this channel).
LISTEN wakeful_work;

-- name: lock_destination
-- One dispatcher per destination at a time; the others skip it instead of waiting. Advisory
-- locks are database-wide: the key names the schema, so deployments sharing a database (in
-- schemas of their own) never skip each other's destinations.
SELECT pg_try_advisory_xact_lock(
    hashtextextended(current_schema() || '/' || %(channel)s || '/' || %(thread_ts)s, 7)
) AS ok;

-- name: prune_events
-- Done events last touched before the cutoff, oldest first, one batch (rows another pruner
-- holds are skipped).
DELETE FROM events WHERE id IN (
    SELECT id FROM events WHERE status = 'done' AND updated_at < %(cutoff)s
    ORDER BY updated_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_outbox
-- Sent outbox rows sent before the cutoff, oldest first, one batch.
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE status = 'sent' AND sent_at < %(cutoff)s
    ORDER BY sent_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_runs
-- Run-log rows of runs finished before the cutoff, oldest first, one batch.
DELETE FROM runs WHERE id IN (
    SELECT id FROM runs WHERE finished_at < %(cutoff)s
    ORDER BY finished_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_approvals
-- Approvals answered (or expired) before the cutoff, oldest first, one batch.
DELETE FROM approvals WHERE id IN (
    SELECT id FROM approvals WHERE answer IS NOT NULL AND answered_at < %(cutoff)s
    ORDER BY answered_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_threads
-- Threads the bot last took part in before the cutoff, oldest first, one batch.
DELETE FROM threads WHERE (channel, thread_ts) IN (
    SELECT channel, thread_ts FROM threads WHERE last_at < %(cutoff)s
    ORDER BY last_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_steps
-- Replay-only steps (a model's answer, kept for a retry) recorded before the cutoff, oldest
-- first, one batch. Steps that record a side effect are never pruned.
DELETE FROM steps WHERE key IN (
    SELECT key FROM steps WHERE replay = 1 AND created_at < %(cutoff)s
    ORDER BY created_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: prune_memories
-- Memory versions followed by a newer one, written before the cutoff, oldest first, one batch:
-- a document's newest version stays whatever its age.
DELETE FROM memories WHERE (owner, path, version) IN (
    SELECT owner, path, version FROM memories WHERE latest = 0 AND written_at < %(cutoff)s
    ORDER BY written_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: oldest_history
-- The age of the oldest prunable row of each pruned table (each an index's first entry).
SELECT (SELECT MIN(updated_at) FROM events WHERE status = 'done') AS events,
       (SELECT MIN(sent_at) FROM outbox WHERE status = 'sent') AS outbox,
       (SELECT MIN(finished_at) FROM runs) AS runs,
       (SELECT MIN(created_at) FROM steps WHERE replay = 1) AS steps,
       (SELECT MIN(answered_at) FROM approvals WHERE answer IS NOT NULL) AS approvals,
       (SELECT MIN(last_at) FROM threads) AS threads,
       (SELECT MIN(written_at) FROM memories WHERE latest = 0) AS memories;

-- name: server_time
-- The database server's clock in seconds: every host of a deployment takes its time from it.
SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now;

-- name: store_synchronous
-- Doctor: how durable a commit is (PostgreSQL: synchronous_commit, 'on' or stronger).
SELECT current_setting('synchronous_commit') AS synchronous;

-- Dead-letter operations and attempts' retention (issue 27).

-- name: matching_events
-- Dead (or discarded) events matching an operator's filter, by id after a cursor (status index).
SELECT * FROM events
WHERE status = %(status)s
      AND (%(inbox)s::text IS NULL OR inbox = %(inbox)s::text)
      AND (%(error)s::text IS NULL OR strpos(error, %(error)s::text) > 0)
      AND (%(since)s::bigint IS NULL OR updated_at >= %(since)s::bigint)
      AND (%(until)s::bigint IS NULL OR updated_at < %(until)s::bigint)
      AND (%(ids)s::jsonb IS NULL
           OR id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint))
  AND id > %(after)s
ORDER BY id LIMIT %(limit)s;

-- name: discard_ids
-- Discard the listed events (a JSON array of ids) still in :status: kept, no longer dead.
UPDATE events SET status = 'discarded', updated_at = %(now)s
WHERE status = %(status)s
  AND id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint)
RETURNING id, inbox;

-- name: requeue_ids
-- Requeue the listed events (a JSON array of ids) still in :status: pending now, attempts
-- reset; idle workers woken.
WITH requeued AS (
    UPDATE events SET status = 'pending', attempts = 0, not_before = %(now)s, error = NULL,
        gen = 0, updated_at = %(now)s
    WHERE status = %(status)s
      AND id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint)
    RETURNING id, inbox
)
SELECT id, inbox, pg_notify('wakeful_work', inbox) AS woke FROM requeued;

-- name: store_size
-- The database's size in bytes (PostgreSQL has no cap of wakeful's).
SELECT pg_database_size(current_database()) AS bytes;

-- name: oldest_prunable_attempt
-- When the oldest attempt retention may drop finished (ms): one of an event done or gone.
SELECT finished_ms AS at FROM attempts
WHERE NOT EXISTS (SELECT 1 FROM events WHERE events.id = attempts.event_id
                  AND events.status <> 'done')
ORDER BY finished_ms LIMIT 1;

-- name: prune_attempts
-- Attempts finished before the cutoff whose event is done or gone, oldest first, one batch.
DELETE FROM attempts WHERE id IN (
    SELECT id FROM attempts
    WHERE finished_ms < %(cutoff_ms)s
      AND NOT EXISTS (SELECT 1 FROM events WHERE events.id = attempts.event_id
                      AND events.status <> 'done')
    ORDER BY finished_ms LIMIT %(batch)s FOR UPDATE SKIP LOCKED
);

-- name: latest_attempt_trace
-- The trace of the latest traced attempt of one of the listed events (a JSON array of ids):
-- the failed run a retry's span links to (attempts_event index).
SELECT trace FROM attempts
WHERE event_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)::bigint)
  AND trace IS NOT NULL
ORDER BY finished_ms DESC, id DESC LIMIT 1;

-- name: erase_xid
-- The erasing transaction's id (an xid8, as bigint), recorded with its audit line: a scrub
-- waits until no transaction as old as it is left (scrub_horizon_held).
SELECT pg_current_xact_id()::text::bigint AS xid;

-- name: scrub_horizon_held
-- How many transactions (or their snapshots) may still read rows as they were before the
-- erasing transaction %(xid)s (an xid8) ended: one as old or older running in this database,
-- a snapshot taken before it committed, a prepared transaction, a replication slot or a
-- standby's feedback. While any does, VACUUM FULL keeps the erased rows ("recently dead")
-- in the copy it makes, and the erased text stays on disk (issue 38). Only ids are read:
-- any role sees them (pg_stat_activity hides other roles' queries, not their xids).
WITH erased AS (
    SELECT (%(xid)s %% 4294967296)::text::xid AS x,
           pg_snapshot_xmax(pg_current_snapshot())::text::bigint - %(xid)s AS behind
), older AS (
    SELECT backend_xid AS x FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datid IS NULL)
    UNION ALL
    SELECT backend_xmin FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datid IS NULL)
    UNION ALL
    SELECT transaction FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT xmin FROM pg_replication_slots
    WHERE database IS NULL OR database = current_database()
)
SELECT count(*) AS n FROM older, erased
WHERE erased.behind < 2147483648 AND age(older.x) >= age(erased.x);
