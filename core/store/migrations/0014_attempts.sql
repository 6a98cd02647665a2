-- Dead-letter operations and the error of every attempt (issue 27).
--
-- An operator can discard a dead event: it leaves the dead count (so `WakefulDeadEvents > 0`
-- clears) but is kept, as `discarded`, for anyone who asks. The status CHECK is the schema's,
-- and neither dialect alters a CHECK alike: the table is rebuilt, ids kept.
CREATE TABLE events_v13 (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'dead', 'discarded')),
    attempts BIGINT NOT NULL DEFAULT 0,
    gen BIGINT NOT NULL DEFAULT 0,
    not_before BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    traceback TEXT,
    UNIQUE (source, source_id)
);
INSERT INTO events_v13 (id, inbox, source, source_id, payload, status, attempts, gen,
                        not_before, error, created_at, updated_at, traceback)
SELECT id, inbox, source, source_id, payload, status, attempts, gen, not_before, error,
       created_at, updated_at, traceback
FROM events;
DROP TABLE events;
ALTER TABLE events_v13 RENAME TO events;
{{RESEQUENCE events}}
CREATE INDEX events_status ON events (status, inbox, id);
CREATE INDEX events_done_age ON events (updated_at) WHERE status = 'done';

-- Every attempt that did not end well (failed, dead, fenced): its error kept apart from the
-- event's latest, written in the transaction that records the run's end (a fenced run's in
-- one of its own, since its finish is rolled back). The traceback is bounded (8 KiB).
CREATE TABLE attempts (
    id {{IDENTITY}},
    event_id BIGINT NOT NULL,
    inbox TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    run_id TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    finished_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error_type TEXT,
    message TEXT,
    traceback TEXT
);
CREATE INDEX attempts_event ON attempts (event_id, attempt);
CREATE INDEX attempts_age ON attempts (finished_ms);

-- A run's outcome (ok, failed, dead), the run_id its log lines carry, and its times in ms.
ALTER TABLE runs ADD COLUMN run_id TEXT;
ALTER TABLE runs ADD COLUMN outcome TEXT;
ALTER TABLE runs ADD COLUMN started_ms BIGINT;
ALTER TABLE runs ADD COLUMN finished_ms BIGINT;

-- What an operator did to dead events (discard, requeue): who, when, with what filter, how
-- many. The row is written first and counted up by each batch, so a bulk operation cut short
-- still says how far it got.
CREATE TABLE operations (
    id {{IDENTITY}},
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    filter TEXT NOT NULL,
    touched BIGINT NOT NULL DEFAULT 0,
    at BIGINT NOT NULL
);
