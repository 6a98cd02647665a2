-- No silence (issue 33): an approved tool's failure is a stored wait or an answer, a crash
-- costs seconds, and the time a person waits for a first word is measured.

-- An approved call's fate after its yes: `waiting` while a transient failure holds it (retried
-- under the same key at `tool_retry_at`, until `tool_first_failed_at` + WAKEFUL_TOOL_RETRY_FOR),
-- then `done`, `failed` (a permanent error) or `given_up`. `tool_error` is the latest reason,
-- said to the person; `tool_told` marks the one "not done yet" they were sent.
ALTER TABLE approvals ADD COLUMN tool_state TEXT;
ALTER TABLE approvals ADD COLUMN tool_error TEXT;
ALTER TABLE approvals ADD COLUMN tool_first_failed_at BIGINT;
ALTER TABLE approvals ADD COLUMN tool_tries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE approvals ADD COLUMN tool_retry_at BIGINT;
ALTER TABLE approvals ADD COLUMN tool_told BIGINT NOT NULL DEFAULT 0;
CREATE INDEX approvals_tool_waiting ON approvals (tool_retry_at) WHERE tool_state = 'waiting';
-- `wakeful inspect` lists the calls that failed for good or were given up, latest first.
CREATE INDEX approvals_tool_ended ON approvals (answered_at)
    WHERE tool_state IN ('failed', 'given_up');

-- A step whose call ended in a failure that stands (a permanent error, a tool given up): the
-- error is its outcome, and nothing calls it again.
ALTER TABLE steps ADD COLUMN error TEXT;

-- Every wakeful process records that it is alive; a lease names the process that holds it,
-- so a holder known dead (its pid gone on this host, or silent for three heartbeats) loses
-- its leases at once instead of after their TTL. Fencing is the generation's, as before.
-- `boot` is the host's boot id and the pid namespace (a pid is checked only where both are
-- the checker's own); `pid_start` the pid's start time, so a reused pid is told apart.
CREATE TABLE processes (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    boot TEXT NOT NULL,
    pid BIGINT NOT NULL,
    pid_start TEXT NOT NULL,
    role TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at BIGINT NOT NULL
);
CREATE INDEX processes_seen ON processes (seen_at);
CREATE INDEX processes_here ON processes (host, boot);
ALTER TABLE leases ADD COLUMN process TEXT;
CREATE INDEX leases_process ON leases (process) WHERE process IS NOT NULL;

-- A person's event waits from its storing until the first post back to that person (a reply,
-- a notice, a prompt, an ephemeral): `waiting_since` is set when it is stored and cleared by
-- that post (wakeful_unanswered_seconds, and the gauge of people waiting in silence).
ALTER TABLE events ADD COLUMN waiting_since BIGINT;
CREATE INDEX events_waiting ON events (waiting_since) WHERE waiting_since IS NOT NULL;

-- Limits (issue 34, item 5): a model spend budget per person and per workspace, read before
-- each model call. A run's estimated model cost (the sum of its usage's known costs; NULL when
-- it made no priced call) and the workspace of its inbox (NULL for a conversation's inbox) are
-- logged with it, so the spend of the last 24 hours is one sum over an index (rows of runs
-- logged before this migration carry no cost, and count as none).
ALTER TABLE runs ADD COLUMN cost DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN team TEXT;
CREATE INDEX runs_spend ON runs (inbox, finished_at, cost) WHERE cost > 0;
CREATE INDEX runs_team_spend ON runs (team, finished_at, cost) WHERE cost > 0;
