-- The statements only the SQLite store runs this way, by name; each one has a namesake in
-- postgres.sql. Parameters are :named. Everything both stores run alike is in shared.sql:
-- a new statement goes there unless its SQL must differ between the two dialects (then here
-- and in postgres.sql, under the same name). A name defined here and in shared.sql is refused.

-- name: create_migrations_table
-- The migration record, created before the first migration runs.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL
);

-- name: migration_lock
-- One migrator at a time: SQLite needs no lock, BEGIN IMMEDIATE already lets one in.
SELECT 1 AS ok;

-- name: record_migration
-- Record a migration, in the migration's own transaction.
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, datetime('now'));

-- name: insert_events
-- The one way an event enters the inbox (base.insert_events): store each delivery unless its
-- (source, source_id) key exists, the first copy in a batch winning; the new rows' ids with
-- their keys. The VALUES row is repeated once per event of a batch (Tx.many). `trace`: the
-- traceparent of the span that stored it (NULL: not traced).
INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at, waiting_since,
                    trace)
VALUES (:inbox, :source, :source_id, :payload, :now, :now, :waiting, :trace)
ON CONFLICT (source, source_id) DO NOTHING
RETURNING id, source, source_id;

-- name: get_lease_for_update
-- The lease row, locked for the write that follows.
SELECT * FROM leases WHERE inbox = :inbox;

-- name: get_lease_for_acquire
-- The lease row, locked; one another transaction holds is skipped.
SELECT * FROM leases WHERE inbox = :inbox;

-- name: due_timers
-- Timers due now, oldest first, a page at a time.
SELECT * FROM timers WHERE next_at <= :now ORDER BY next_at, id LIMIT :limit;

-- name: get_approval_for_update
-- An approval, locked for the answer that follows.
SELECT * FROM approvals WHERE id = :id;

-- name: listen_work
-- Wake on every event another process stores: SQLite cannot, so workers elsewhere poll.
SELECT 1 AS ok;

-- name: lock_destination
-- One dispatcher per destination at a time: BEGIN IMMEDIATE already serialises them.
SELECT 1 AS ok;

-- name: prune_events
-- Done events last touched before the cutoff, oldest first, one batch.
DELETE FROM events WHERE id IN (
    SELECT id FROM events INDEXED BY events_done_age
    WHERE status = 'done' AND updated_at < :cutoff
    ORDER BY updated_at LIMIT :batch
);

-- name: prune_outbox
-- Sent outbox rows sent before the cutoff, oldest first, one batch.
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox INDEXED BY outbox_sent_age
    WHERE status = 'sent' AND sent_at < :cutoff
    ORDER BY sent_at LIMIT :batch
);

-- name: prune_runs
-- Run-log rows of runs finished before the cutoff, oldest first, one batch.
DELETE FROM runs WHERE id IN (
    SELECT id FROM runs INDEXED BY runs_age
    WHERE finished_at < :cutoff ORDER BY finished_at LIMIT :batch
);

-- name: prune_approvals
-- Approvals answered (or expired) before the cutoff, oldest first, one batch.
DELETE FROM approvals WHERE id IN (
    SELECT id FROM approvals INDEXED BY approvals_answered_age
    WHERE answer IS NOT NULL AND answered_at < :cutoff
    ORDER BY answered_at LIMIT :batch
);

-- name: prune_threads
-- Threads the bot last took part in before the cutoff, oldest first, one batch.
DELETE FROM threads WHERE rowid IN (
    SELECT rowid FROM threads INDEXED BY threads_age
    WHERE last_at < :cutoff ORDER BY last_at LIMIT :batch
);

-- name: prune_steps
-- Replay-only steps (a model's answer, kept for a retry) recorded before the cutoff, oldest
-- first, one batch. Steps that record a side effect are never pruned.
DELETE FROM steps WHERE rowid IN (
    SELECT rowid FROM steps INDEXED BY steps_replay_age
    WHERE replay = 1 AND created_at < :cutoff ORDER BY created_at LIMIT :batch
);

-- name: prune_memories
-- Memory versions followed by a newer one, written before the cutoff, oldest first, one batch:
-- a document's newest version stays whatever its age.
DELETE FROM memories WHERE rowid IN (
    SELECT rowid FROM memories INDEXED BY memories_old
    WHERE latest = 0 AND written_at < :cutoff ORDER BY written_at LIMIT :batch
);

-- name: oldest_history
-- The age of the oldest prunable row of each pruned table (each an index's first entry).
SELECT (SELECT MIN(updated_at) FROM events INDEXED BY events_done_age
        WHERE status = 'done') AS events,
       (SELECT MIN(sent_at) FROM outbox INDEXED BY outbox_sent_age
        WHERE status = 'sent') AS outbox,
       (SELECT MIN(finished_at) FROM runs INDEXED BY runs_age) AS runs,
       (SELECT MIN(created_at) FROM steps INDEXED BY steps_replay_age
        WHERE replay = 1) AS steps,
       (SELECT MIN(answered_at) FROM approvals INDEXED BY approvals_answered_age
        WHERE answer IS NOT NULL) AS approvals,
       (SELECT MIN(last_at) FROM threads INDEXED BY threads_age) AS threads,
       (SELECT MIN(written_at) FROM memories INDEXED BY memories_old
        WHERE latest = 0) AS memories;

-- name: server_time
-- The database's own clock: SQLite runs on this host and has none of its own (NULL).
SELECT NULL AS now;

-- name: store_synchronous
-- Doctor: how durable a commit is (SQLite: PRAGMA synchronous, 2 = FULL).
PRAGMA synchronous;

-- Dead-letter operations and attempts' retention (issue 27).

-- name: matching_events
-- Dead (or discarded) events matching an operator's filter, by id after a cursor (status index).
SELECT * FROM events
WHERE status = :status
  AND (:inbox IS NULL OR inbox = :inbox)
  AND (:error IS NULL OR instr(error, :error) > 0)
  AND (:since IS NULL OR updated_at >= :since)
  AND (:until IS NULL OR updated_at < :until)
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: discard_ids
-- Discard the listed events (a JSON array of ids) still in :status: kept, no longer dead.
UPDATE events SET status = 'discarded', updated_at = :now
WHERE status = :status AND id IN (SELECT value FROM json_each(:ids))
RETURNING id, inbox;

-- name: requeue_ids
-- Requeue the listed events (a JSON array of ids) still in :status: pending now, attempts reset.
UPDATE events SET status = 'pending', attempts = 0, not_before = :now, error = NULL, gen = 0,
    updated_at = :now
WHERE status = :status AND id IN (SELECT value FROM json_each(:ids))
RETURNING id, inbox;

-- name: store_size
-- The page size, for the store's size against WAKEFUL_SQLITE_MAX_PAGES (file bytes: the OS).
SELECT page_size FROM pragma_page_size();

-- name: oldest_prunable_attempt
-- When the oldest attempt retention may drop finished (ms): one of an event done or gone.
SELECT finished_ms AS at FROM attempts INDEXED BY attempts_age
WHERE NOT EXISTS (SELECT 1 FROM events WHERE events.id = attempts.event_id
                  AND events.status <> 'done')
ORDER BY finished_ms LIMIT 1;

-- name: prune_attempts
-- Attempts finished before the cutoff whose event is done or gone, oldest first, one batch.
DELETE FROM attempts WHERE id IN (
    SELECT id FROM attempts INDEXED BY attempts_age
    WHERE finished_ms < :cutoff_ms
      AND NOT EXISTS (SELECT 1 FROM events WHERE events.id = attempts.event_id
                      AND events.status <> 'done')
    ORDER BY finished_ms LIMIT :batch
);

-- name: latest_attempt_trace
-- The trace of the latest traced attempt of one of the listed events (a JSON array of ids):
-- the failed run a retry's span links to (attempts_event index).
SELECT trace FROM attempts
WHERE event_id IN (SELECT value FROM json_each(:ids)) AND trace IS NOT NULL
ORDER BY finished_ms DESC, id DESC LIMIT 1;

-- name: erase_xid
-- PostgreSQL's erasing transaction (postgres.sql); SQLite keeps no old row versions that an
-- older transaction could still need: NULL.
SELECT NULL AS xid;

-- name: scrub_horizon_held
-- PostgreSQL's question only (postgres.sql): on SQLite a reader holding the WAL holds back the
-- checkpoint instead, and the scrub says so itself (SQLiteConnector.scrub).
SELECT 0 AS n;
