-- Forgetting a person (issue 38): whether the store's files were scrubbed of what an erasure
-- removed. `unscrubbed` names the tables (comma-separated) whose files may still hold it: a
-- scrub that could not finish (a lock not got, an older transaction still running, a reader
-- holding SQLite's WAL) leaves them, and the scheduler retries only those until none is left;
-- `scrubbed_at` is when the last went (NULL: not yet). `erase_xid`: PostgreSQL's erasing
-- transaction (an xid8), whose old rows no scrub can drop while a transaction as old runs;
-- NULL on SQLite. An erasure made before this migration is scrubbed once more, to be sure.
ALTER TABLE forgets ADD COLUMN unscrubbed TEXT NOT NULL
    DEFAULT 'memories,events,attempts,outbox,sessions,set_aside_sessions,steps,timers,approvals';
ALTER TABLE forgets ADD COLUMN scrubbed_at BIGINT;
ALTER TABLE forgets ADD COLUMN erase_xid BIGINT;
CREATE INDEX forgets_unscrubbed ON forgets (id) WHERE scrubbed_at IS NULL;
