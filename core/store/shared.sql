-- The statements both stores run alike, by name, written once. Parameters are :named; the
-- PostgreSQL store reads each `:x` as `%(x)s` at load time (sql.py `for_dialect`), so a
-- statement here must be SQL both SQLite and PostgreSQL accept as it stands.
--
-- Where a new statement goes: here, unless its SQL must differ between the two (a lock such
-- as FOR UPDATE, a function one of them lacks, a pragma or a setting); then it goes in both
-- sqlite.sql and postgres.sql under the same name, and nowhere here. A name is defined once
-- per store: loading refuses one defined twice, here and in a dialect file or twice in one.
-- Times are integer seconds passed in by the caller: no statement reads the database's clock.

-- name: ping
-- A trivial query: the store answers (for /healthz).
SELECT 1 AS ok;

-- name: schema_version
-- The highest migration applied.
SELECT MAX(version) AS version FROM schema_migrations;

-- name: migration_applied
-- Whether a migration version is already recorded.
SELECT 1 AS ok FROM schema_migrations WHERE version = :version;

-- name: get_event
-- One event by id.
SELECT * FROM events WHERE id = :id;

-- name: get_event_by_key
-- One event by its source's key.
SELECT * FROM events WHERE source = :source AND source_id = :source_id;

-- name: inbox_events
-- Every event of an inbox in arrival order (through the status index).
SELECT * FROM events
WHERE status IN ('pending', 'running', 'done', 'dead') AND inbox = :inbox
ORDER BY id;

-- name: inbox_open_events
-- Pending and running events of an inbox, oldest first.
SELECT * FROM events
WHERE inbox = :inbox AND status IN ('pending', 'running')
ORDER BY id;

-- name: count_events
-- How many events, of one status or all.
SELECT COUNT(*) AS n FROM events
WHERE CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT);

-- name: get_lease
-- The lease row, for reading.
SELECT * FROM leases WHERE inbox = :inbox;

-- name: lease_row_exists
-- Whether the inbox has a lease row at all (locked or not).
SELECT 1 AS ok FROM leases WHERE inbox = :inbox;

-- name: update_lease
-- Set the lease's holder, generation and expiry (renew, release, lapse).
UPDATE leases SET holder = :holder, gen = :gen, expires_at = :expires_at WHERE inbox = :inbox;

-- name: settle_inbox
-- Before a claim: events left running by an older generation go back to pending, and those
-- that reached max_attempts become dead instead; each row as it became is returned (a dead
-- one's person is told).
UPDATE events
SET status = CASE WHEN attempts >= :max_attempts THEN 'dead' ELSE 'pending' END,
    error = CASE WHEN attempts >= :max_attempts
                 THEN COALESCE(:error || '; last error: ' || error, :error)
                 ELSE error END,
    updated_at = :now
WHERE inbox = :inbox
  AND ((status = 'running' AND gen <> :gen)
       OR (status = 'pending' AND attempts >= :max_attempts))
RETURNING *;

-- name: mark_running
-- Claim one event: running under this generation, attempt counted, backoff fixed.
UPDATE events
SET status = 'running', gen = :gen, attempts = :attempts, not_before = :not_before,
    updated_at = :now
WHERE id = :id;

-- name: dead_events
-- Dead events of every inbox, oldest first.
SELECT * FROM events WHERE status = 'dead' ORDER BY id LIMIT :limit;

-- name: team_dead_events
-- Dead events of one workspace's inboxes, oldest first (the status index).
SELECT * FROM events
WHERE status = 'dead' AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY id LIMIT :limit;

-- name: inbox_dead_events
-- Dead events of one inbox, oldest first.
SELECT * FROM events WHERE status = 'dead' AND inbox = :inbox ORDER BY id;

-- name: requeue_event
-- A dead event back to pending with its attempts reset.
UPDATE events SET status = 'pending', attempts = 0, not_before = 0, error = NULL, gen = 0,
    updated_at = :now
WHERE id = :id AND status = 'dead';

-- name: team_requeue_event
-- A dead event of one workspace's inboxes back to pending (an approver of that workspace).
UPDATE events SET status = 'pending', attempts = 0, not_before = 0, error = NULL, gen = 0,
    updated_at = :now
WHERE id = :id AND status = 'dead' AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix;

-- name: upsert_session
-- Save an inbox's agent state.
INSERT INTO sessions (inbox, state, updated_at) VALUES (:inbox, :state, :now)
ON CONFLICT (inbox) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at;

-- name: get_session
-- An inbox's saved agent state.
SELECT state FROM sessions WHERE inbox = :inbox;

-- name: upsert_timer
-- Register or replace a timer by id, with the trace of the run that set it (last).
INSERT INTO timers (id, inbox, kind, action, next_at, anchor, every_seconds, daily_at, tz,
                    policy, payload, created_at, trace)
VALUES (:id, :inbox, :kind, :action, :next_at, :anchor, :every_seconds, :daily_at, :tz,
        :policy, :payload, :now, :trace)
ON CONFLICT (id) DO UPDATE SET
    inbox = excluded.inbox, kind = excluded.kind, action = excluded.action,
    next_at = excluded.next_at, anchor = excluded.anchor,
    every_seconds = excluded.every_seconds, daily_at = excluded.daily_at, tz = excluded.tz,
    policy = excluded.policy, payload = excluded.payload, trace = excluded.trace;

-- name: withdraw_held_digests
-- The digests a cancelled timer produced that the outbox still holds back: never sent.
DELETE FROM outbox
WHERE inbox = :inbox AND kind = 'digest' AND ref = :ref AND status = 'pending';

-- name: delete_timer
-- Drop a timer by id.
DELETE FROM timers WHERE id = :id;

-- name: inbox_timers
-- An inbox's timers, soonest first.
SELECT * FROM timers WHERE inbox = :inbox ORDER BY next_at, id;

-- name: inbox_capped_timers
-- The ids of an inbox's timers that count toward WAKEFUL_MAX_TIMERS_PER_INBOX: all but the
-- approvals' expiries (inbox index).
SELECT id FROM timers WHERE inbox = :inbox AND action = 'event';

-- name: next_timer_at
-- When the earliest timer is due.
SELECT MIN(next_at) AS next_at FROM timers;

-- name: advance_timer
-- Move a timer to its next occurrence.
UPDATE timers SET next_at = :next_at WHERE id = :id;

-- name: insert_approval
-- Open an approval unless its request id exists, with the trace of the run that asked.
INSERT INTO approvals (id, inbox, tool, args, requester, approvers, deadline, created_at,
                       summary, channel, thread_ts, trace)
VALUES (:id, :inbox, :tool, :args, :requester, :approvers, :deadline, :now,
        :summary, :channel, :thread_ts, :trace)
ON CONFLICT (id) DO NOTHING;

-- name: get_approval
-- An approval, for reading.
SELECT * FROM approvals WHERE id = :id;

-- name: set_answer
-- Record the answer that stands, unless one already does.
UPDATE approvals SET answer = :answer, answered_by = :user, answered_at = :now
WHERE id = :id AND answer IS NULL;

-- name: count_open_approvals
-- How many of an inbox's approvals await an answer: the open cap counts them.
SELECT COUNT(*) AS n FROM approvals WHERE inbox = :inbox AND answer IS NULL;

-- name: inbox_approvals
-- An inbox's approvals, oldest first.
SELECT * FROM approvals WHERE inbox = :inbox ORDER BY created_at, id;

-- name: set_prompt
-- Where an approval's prompt was posted, so its outcome can rewrite it.
UPDATE approvals SET prompt_channel = :channel, prompt_ts = :ts WHERE id = :id;

-- name: insert_outbox
-- Queue one outbound message as a pending row; `trace`: the run (or request) that queued it.
INSERT INTO outbox (inbox, kind, channel, thread_ts, text, blocks, priority, ref, user_id,
                    facts, answers, look_first, created_at, trace)
VALUES (:inbox, :kind, :channel, :thread_ts, :text, :blocks, :priority, :ref, :user_id,
        :facts, :answers, :look_first, :now, :trace);

-- name: open_rows
-- A destination's pending and sending rows, in order.
SELECT * FROM outbox
WHERE channel = :channel AND thread_ts = :thread_ts AND status IN ('pending', 'sending')
ORDER BY id
LIMIT :limit;

-- name: get_destination
-- When a destination last got a normal-priority post.
SELECT last_sent_at FROM destinations WHERE channel = :channel AND thread_ts = :thread_ts;

-- name: touch_destination
-- Restart a destination's gap.
INSERT INTO destinations (channel, thread_ts, last_sent_at) VALUES (:channel, :thread_ts, :now)
ON CONFLICT (channel, thread_ts) DO UPDATE SET last_sent_at = excluded.last_sent_at;

-- name: claim_row
-- A pending row into a batch: sending, under a dispatch id, until a deadline.
UPDATE outbox
SET status = 'sending', dispatch_id = :dispatch_id, in_flight_until = :until,
    attempts = attempts + 1
WHERE id = :id AND status = 'pending';

-- name: reclaim_batch
-- Hand a batch out again after its deadline, same dispatch id.
UPDATE outbox SET in_flight_until = :until, attempts = attempts + 1
WHERE dispatch_id = :dispatch_id AND status = 'sending' AND in_flight_until <= :now;

-- name: defer_batch
-- A transient failure: keep the batch sending, retry after `until`; only by its holder (the
-- deadline it last wrote, `held`, is still there).
UPDATE outbox SET in_flight_until = :until, error = :error
WHERE dispatch_id = :dispatch_id AND status = 'sending' AND in_flight_until = :held;

-- name: renew_batch
-- Keep a claimed batch in flight until `until`, fenced: only while its deadline is still the
-- one its sender last wrote (`held`), i.e. no other dispatcher has taken the batch over.
UPDATE outbox SET in_flight_until = :until
WHERE dispatch_id = :dispatch_id AND status = 'sending' AND in_flight_until = :held;

-- name: mark_row_sent
-- A delivered row, with the posted message's ts.
UPDATE outbox SET status = 'sent', sent_at = :now, posted_ts = :ts, error = NULL
WHERE id = :id AND dispatch_id = :dispatch_id AND status = 'sending';

-- name: end_wait
-- A person's event got its first post back: their wait ends (its storing returned, to be
-- measured: a wait starts when its event is stored).
UPDATE events SET waiting_since = NULL
WHERE source = :source AND source_id = :source_id AND waiting_since IS NOT NULL
RETURNING created_at;

-- name: gauge_waiting
-- Inboxes where a person has waited for a first word back for over 1, 5 and 15 minutes (waits
-- that began in the last day: an older one is a dead letter's business, not a gauge's).
SELECT COUNT(DISTINCT CASE WHEN waiting_since <= :over_1m THEN inbox END) AS over_1m,
       COUNT(DISTINCT CASE WHEN waiting_since <= :over_5m THEN inbox END) AS over_5m,
       COUNT(DISTINCT CASE WHEN waiting_since <= :over_15m THEN inbox END) AS over_15m
FROM events
WHERE waiting_since IS NOT NULL AND waiting_since >= :horizon AND waiting_since <= :over_1m;

-- name: fail_row
-- A permanent failure: park the row as failed.
UPDATE outbox SET status = 'failed', error = :error
WHERE id = :id AND dispatch_id = :dispatch_id AND status = 'sending';

-- name: all_outbox
-- Outbox rows of every inbox, of one status or all.
SELECT * FROM outbox
WHERE CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT)
ORDER BY id;

-- name: inbox_outbox
-- Outbox rows of one inbox.
SELECT * FROM outbox WHERE inbox = :inbox ORDER BY id;

-- name: failed_outbox
-- Parked outbox rows, oldest first.
SELECT * FROM outbox WHERE status = 'failed' ORDER BY id LIMIT :limit;

-- name: team_failed_outbox
-- Parked outbox rows of one workspace's inboxes, oldest first (the failed rows index).
SELECT * FROM outbox
WHERE status = 'failed' AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY id LIMIT :limit;

-- name: requeue_outbox
-- A parked row back to pending with its attempts reset.
UPDATE outbox
SET status = 'pending', attempts = 0, dispatch_id = NULL, in_flight_until = 0, error = NULL
WHERE id = :id AND status = 'failed';

-- name: team_requeue_outbox
-- A parked row of one workspace's inboxes back to pending (an approver of that workspace).
UPDATE outbox
SET status = 'pending', attempts = 0, dispatch_id = NULL, in_flight_until = 0, error = NULL
WHERE id = :id AND status = 'failed' AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix;

-- name: insert_step
-- Record a durable step's result under its key, unless one is recorded.
-- Not while the inbox's person was forgotten under a run in progress (`forget_inbox` marks
-- its lease): that run's words are not written back.
INSERT INTO steps (key, inbox, name, args, result, replay, created_at, error)
SELECT :key, :inbox, :name, :args, :result, :replay, :now, :error
WHERE NOT EXISTS (SELECT 1 FROM leases WHERE inbox = :inbox AND holder = 'forgotten')
ON CONFLICT (key) DO NOTHING;

-- name: get_step
-- One recorded step, by its key.
SELECT * FROM steps WHERE key = :key;

-- name: list_steps
-- Recorded steps of one inbox and/or name, newest first.
SELECT * FROM steps
WHERE (CAST(:inbox AS TEXT) IS NULL OR inbox = CAST(:inbox AS TEXT))
  AND (CAST(:name AS TEXT) IS NULL OR name = CAST(:name AS TEXT))
ORDER BY created_at DESC, key DESC
LIMIT :limit;

-- name: team_steps
-- Recorded steps of one workspace's inboxes, newest first (a scan, as `list_steps` of no
-- inbox and no name is: an agent's look over all it did).
SELECT * FROM steps
WHERE substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY created_at DESC, key DESC
LIMIT :limit;

-- name: team_named_steps
-- Recorded steps of one name in one workspace's inboxes, newest first (the name index).
SELECT * FROM steps
WHERE name = :name AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY created_at DESC, key DESC
LIMIT :limit;

-- name: open_approvals_first
-- Open approvals of every inbox, soonest deadline first (what an approver may answer).
SELECT * FROM approvals WHERE answer IS NULL ORDER BY deadline, id LIMIT :limit;

-- name: open_approvals_requested_by
-- Open approvals one person asked for, in any inbox, soonest deadline first.
SELECT * FROM approvals WHERE answer IS NULL AND requester = :user
ORDER BY deadline LIMIT :limit;

-- name: open_approvals
-- Approvals no one has answered yet, of one tool or all, soonest deadline first.
SELECT * FROM approvals
WHERE answer IS NULL AND (CAST(:tool AS TEXT) IS NULL OR tool = CAST(:tool AS TEXT))
ORDER BY deadline, id;

-- name: team_open_approvals
-- Open approvals of one workspace's inboxes (those starting with its `<team>:`), of one tool
-- or all, soonest deadline first (the open approvals index).
SELECT * FROM approvals
WHERE answer IS NULL AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
  AND (CAST(:tool AS TEXT) IS NULL OR tool = CAST(:tool AS TEXT))
ORDER BY deadline, id;

-- name: team_open_approvals_first
-- Open approvals of one workspace's inboxes, soonest deadline first (what its approvers may
-- answer).
SELECT * FROM approvals
WHERE answer IS NULL AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY deadline, id LIMIT :limit;

-- name: team_open_approvals_requested_by
-- Open approvals one person asked for in one workspace, soonest deadline first.
SELECT * FROM approvals
WHERE answer IS NULL AND requester = :user AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
ORDER BY deadline LIMIT :limit;

-- name: next_lease_seq
-- Take the next number of the inbox's lease sequence.
UPDATE leases SET seq = seq + 1 WHERE inbox = :inbox RETURNING seq;

-- name: insert_run
-- Log a finished run with its claim and finish sequence numbers.
INSERT INTO runs (inbox, holder, gen, claim_seq, finish_seq, events, usage, claimed_at,
                  finished_at, run_id, outcome, started_ms, finished_ms, cost, team)
VALUES (:inbox, :holder, :gen, :claim_seq, :finish_seq, :events, :usage,
        :claimed_at, :now, :run_id, :outcome, :started_ms, :finished_ms, :cost, :team);

-- name: inbox_model_spend
-- What an inbox's model calls cost since a time, as its run log recorded (spend index).
SELECT COALESCE(SUM(cost), 0) AS spent FROM runs
WHERE inbox = :inbox AND finished_at >= :since AND cost > 0;

-- name: team_model_spend
-- What a workspace's model calls cost since a time, every inbox of the team (spend index).
SELECT COALESCE(SUM(cost), 0) AS spent FROM runs
WHERE team = :team AND finished_at >= :since AND cost > 0;

-- name: inbox_runs
-- One inbox's run log, in claim order.
SELECT * FROM runs WHERE inbox = :inbox ORDER BY claim_seq;

-- name: all_runs
-- The whole run log, by inbox and claim order.
SELECT * FROM runs ORDER BY inbox, claim_seq;

-- name: waiting_after
-- A run's interrupt flag: what the inbox received after its batch and still waits (indexed by
-- events_status: status, inbox, id).
SELECT * FROM events
WHERE status = 'pending' AND inbox = :inbox AND id > :after
ORDER BY id
LIMIT :limit;

-- name: next_claimable
-- Claimable events: a retried one first (it is claimed alone), then by arrival.
SELECT * FROM events
WHERE inbox = :inbox AND status = 'pending'
  AND not_before <= :now
ORDER BY attempts > 0 DESC, id
LIMIT :limit;

-- name: take_lease
-- Take over or renew the lease, taking a sequence number; `process` is the holder's process
-- (NULL: none recorded, the lease lasts its TTL whatever becomes of its holder).
UPDATE leases SET holder = :holder, gen = :gen, expires_at = :expires_at, seq = seq + 1,
    process = :process
WHERE inbox = :inbox
RETURNING seq;

-- name: create_lease
-- The inbox's first lease, generation 1, unless another holder made it first.
INSERT INTO leases (inbox, holder, gen, expires_at, seq, process)
VALUES (:inbox, :holder, :gen, :expires_at, 1, :process)
ON CONFLICT (inbox) DO NOTHING
RETURNING seq;

-- name: mark_done_fenced
-- An event done, only if still running under the claim's generation.
UPDATE events SET status = 'done', error = NULL, updated_at = :now
WHERE id = :id AND status = 'running' AND gen = :gen;

-- name: mark_failed_fenced
-- An event back to pending with its error, only if still running under the claim's generation.
UPDATE events
SET status = 'pending', error = :error, traceback = :traceback, updated_at = :now,
    not_before = CASE WHEN :not_before > not_before THEN :not_before ELSE not_before END
WHERE id = :id AND status = 'running' AND gen = :gen;

-- name: mark_waiting_fenced
-- An approved call's event waits on its service: back to pending until its next try, with the
-- attempt its claim counted given back, only if still running under the claim's generation.
UPDATE events
SET status = 'pending', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
    not_before = :not_before, error = :error, traceback = NULL, updated_at = :now
WHERE id = :id AND status = 'running' AND gen = :gen;

-- name: set_tool_waiting
-- An approved call held by a transient failure: since when, how many tries, the next one.
UPDATE approvals
SET tool_state = 'waiting', tool_error = :error, tool_first_failed_at = :first,
    tool_tries = :tries, tool_retry_at = :retry_at, tool_told = :told
WHERE id = :id;

-- name: set_tool_outcome
-- An approved call's end: done, failed (a permanent error) or given up.
UPDATE approvals SET tool_state = :state, tool_error = :error, tool_retry_at = NULL
WHERE id = :id;

-- name: mark_dead_fenced
-- An event dead with its error, only if still running under the claim's generation.
UPDATE events
SET status = 'dead', error = :error, traceback = :traceback, updated_at = :now
WHERE id = :id AND status = 'running' AND gen = :gen;

-- name: give_back_running
-- A store failure, not the events, ended a claim's run: every event still running under the
-- claim's generation goes back to pending with the attempt its claim counted given back.
UPDATE events
SET status = 'pending', attempts = attempts - 1, not_before = :now, updated_at = :now
WHERE inbox = :inbox AND status = 'running' AND gen = :gen AND attempts > 0;

-- name: give_back_settled
-- The same for one claimed event that a takeover's settle put back (pending, or dead for too
-- many attempts) while its run waited for the store, and that no newer claim has taken since.
UPDATE events
SET status = 'pending', attempts = attempts - 1, not_before = :now, updated_at = :now,
    error = CASE WHEN status = 'dead' THEN NULL ELSE error END
WHERE id = :id AND gen = :gen AND attempts > 0
  AND (status = 'pending' OR (status = 'dead' AND error LIKE :too_many));

-- name: run_logged
-- Whether a claim's run is in the run log: a finish of it committed.
SELECT 1 AS ok FROM runs
WHERE inbox = :inbox AND gen = :gen AND claim_seq = :claim_seq;

-- name: set_aside_session
-- Keep an inbox's unusable session for the operator; the run's finish then drops it.
INSERT INTO set_aside_sessions (inbox, state, reason, set_aside_at)
SELECT inbox, state, :reason, :now FROM sessions WHERE inbox = :inbox;

-- name: drop_session
-- Forget an inbox's session: its next run starts fresh.
DELETE FROM sessions WHERE inbox = :inbox;

-- name: set_aside_sessions
-- Sessions set aside, newest first (of one inbox, or of all).
SELECT * FROM set_aside_sessions
WHERE CAST(:inbox AS TEXT) IS NULL OR inbox = CAST(:inbox AS TEXT)
ORDER BY id DESC
LIMIT :limit;

-- name: forgive_session_failures
-- Pending events that failed only on a session now set aside start their attempts over.
UPDATE events SET attempts = 0, not_before = 0, error = NULL, updated_at = :now
WHERE status = 'pending' AND inbox = :inbox AND error LIKE :failed_on_session;

-- name: savepoint
-- Mark a point one run's writes can be undone to without undoing the others' (batched finish).
SAVEPOINT run;

-- name: rollback_to_savepoint
-- Undo one fenced run's writes; the transaction and the other runs' writes go on.
ROLLBACK TO SAVEPOINT run;

-- name: release_savepoint
-- Keep one run's writes (or what is left after a rollback) and forget the savepoint.
RELEASE SAVEPOINT run;

-- name: gauge_events
-- Metrics scrape: events not done, by status, with the oldest one's arrival (status index).
SELECT status, COUNT(*) AS n, MIN(created_at) AS oldest
FROM events
WHERE status IN ('pending', 'running', 'dead')
GROUP BY status;

-- name: gauge_outbox
-- Metrics scrape: held and sending rows (open index), then parked rows (failed index).
SELECT status, COUNT(*) AS n, MIN(created_at) AS oldest
FROM outbox
WHERE status IN ('pending', 'sending')
GROUP BY status
UNION ALL
SELECT 'failed' AS status, COUNT(*) AS n, MIN(created_at) AS oldest
FROM outbox
WHERE status = 'failed';

-- name: gauge_approvals
-- Metrics scrape: approvals still open (the open-approvals index, answered ones never read).
SELECT COUNT(*) AS n FROM approvals WHERE answer IS NULL;

-- name: gauge_timers
-- Metrics scrape: timers due and not fired, and the earliest one's time (due index).
SELECT COUNT(*) AS n, MIN(next_at) AS earliest FROM timers WHERE next_at <= :now;

-- name: inspect_backlog
-- Inspect: inboxes with pending or running events, oldest work first (open rows only).
SELECT inbox,
       SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END) AS pending,
       SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running,
       MIN(created_at) AS oldest
FROM events
WHERE status IN ('pending', 'running')
GROUP BY inbox
ORDER BY oldest, inbox
LIMIT :limit;

-- name: inspect_dead
-- Inspect: inboxes with dead events, most first (dead rows only, from the status index).
SELECT inbox, COUNT(*) AS n, MAX(id) AS last_id
FROM events
WHERE status = 'dead'
GROUP BY inbox
ORDER BY n DESC, inbox
LIMIT :limit;

-- name: inspect_dead_events
-- Inspect: the latest dead events, newest first (dead rows only, from the status index).
SELECT id, inbox, source, source_id, attempts, error, updated_at AS died_at
FROM events
WHERE status = 'dead'
ORDER BY id DESC
LIMIT :limit;

-- name: inspect_held_outbox
-- Inspect: destinations with held or sending outbox rows, oldest first (open rows only); a
-- batch a transient failure deferred (a paused workspace, a 5xx) says why and until when.
SELECT channel, thread_ts, MIN(inbox) AS inbox,
       SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END) AS held,
       SUM(CASE WHEN status = 'sending' THEN 1 ELSE 0 END) AS sending,
       MIN(created_at) AS oldest,
       MAX(CASE WHEN status = 'sending' AND error IS NOT NULL THEN in_flight_until END)
           AS retry_at,
       MAX(CASE WHEN status = 'sending' THEN error END) AS error
FROM outbox
WHERE status IN ('pending', 'sending')
GROUP BY channel, thread_ts
ORDER BY oldest, channel
LIMIT :limit;

-- name: inspect_parked_outbox
-- Inspect: the latest parked (failed) outbox rows (failed rows only).
SELECT id, inbox, channel, attempts, error, created_at
FROM outbox
WHERE status = 'failed'
ORDER BY id DESC
LIMIT :limit;

-- name: inspect_open_approvals
-- Inspect: open approvals, soonest deadline first (the open-approvals index).
SELECT id, inbox, tool, requester, deadline, created_at
FROM approvals
WHERE answer IS NULL
ORDER BY deadline, id
LIMIT :limit;

-- name: inspect_call_counts
-- Inspect: approved calls waiting on a transient failure, and those failed or given up (each
-- count from its partial index; a call done or not yet made is never read).
SELECT 'waiting' AS state, COUNT(*) AS n FROM approvals WHERE tool_state = 'waiting'
UNION ALL
SELECT tool_state AS state, COUNT(*) AS n
FROM approvals
WHERE tool_state IN ('failed', 'given_up')
GROUP BY tool_state;

-- name: inspect_calls_waiting
-- Inspect: approved calls waiting on a transient failure, next retry first (waiting index).
SELECT id, inbox, tool, requester, answered_at, tool_first_failed_at, tool_tries,
       tool_retry_at, tool_error
FROM approvals
WHERE tool_state = 'waiting'
ORDER BY tool_retry_at, id
LIMIT :limit;

-- name: inspect_calls_failed
-- Inspect: the latest approved calls that failed for good or were given up (their index).
SELECT id, inbox, tool, requester, answered_at, tool_state, tool_first_failed_at, tool_tries,
       tool_error
FROM approvals
WHERE tool_state IN ('failed', 'given_up')
ORDER BY answered_at DESC, id
LIMIT :limit;

-- name: inspect_next_timers
-- Inspect: the timers due soonest (due index).
SELECT id, inbox, kind, action, next_at, policy
FROM timers
ORDER BY next_at, id
LIMIT :limit;

-- name: inspect_inbox_events
-- Inspect one inbox: its latest events, newest first; each status read backwards from the
-- status index up to the limit, so an inbox's long history is never walked.
SELECT * FROM (
    SELECT id, source, source_id, status, attempts, gen, error, traceback, created_at,
           updated_at
    FROM events WHERE status = 'pending' AND inbox = :inbox ORDER BY id DESC LIMIT :limit
) AS p
UNION ALL
SELECT * FROM (
    SELECT id, source, source_id, status, attempts, gen, error, traceback, created_at,
           updated_at
    FROM events WHERE status = 'running' AND inbox = :inbox ORDER BY id DESC LIMIT :limit
) AS r
UNION ALL
SELECT * FROM (
    SELECT id, source, source_id, status, attempts, gen, error, traceback, created_at,
           updated_at
    FROM events WHERE status = 'done' AND inbox = :inbox ORDER BY id DESC LIMIT :limit
) AS d
UNION ALL
SELECT * FROM (
    SELECT id, source, source_id, status, attempts, gen, error, traceback, created_at,
           updated_at
    FROM events WHERE status = 'dead' AND inbox = :inbox ORDER BY id DESC LIMIT :limit
) AS x
ORDER BY id DESC
LIMIT :limit;

-- name: inspect_inbox_counts
-- Inspect one inbox: how many events are pending, running and dead (done ones are history).
SELECT status, COUNT(*) AS n
FROM events
WHERE status IN ('pending', 'running', 'dead') AND inbox = :inbox
GROUP BY status;

-- name: inspect_inbox_runs
-- Inspect one inbox: its latest runs from the run log, newest first.
SELECT * FROM runs WHERE inbox = :inbox ORDER BY claim_seq DESC LIMIT :limit;

-- name: inspect_inbox_outbox
-- Inspect one inbox: its latest outbox rows, newest first.
SELECT id, kind, channel, thread_ts, priority, status, attempts, error, text, created_at,
       sent_at
FROM outbox
WHERE inbox = :inbox
ORDER BY id DESC
LIMIT :limit;

-- name: inspect_inbox_timers
-- Inspect one inbox: its timers, soonest first.
SELECT id, inbox, kind, action, next_at, policy
FROM timers
WHERE inbox = :inbox
ORDER BY next_at, id
LIMIT :limit;

-- name: inspect_inbox_approvals
-- Inspect one inbox: its latest approvals, newest first.
SELECT id, inbox, tool, requester, deadline, created_at, answer, answered_by, answered_at,
       tool_state, tool_error, tool_first_failed_at, tool_tries, tool_retry_at
FROM approvals
WHERE inbox = :inbox
ORDER BY created_at DESC, id DESC
LIMIT :limit;

-- name: inbox_source_counts
-- How many events of an inbox arrived since a time, by source (through the status index).
SELECT source, COUNT(*) AS n FROM events
WHERE status IN ('pending', 'running', 'done', 'dead') AND inbox = :inbox
  AND created_at >= :since
GROUP BY source
ORDER BY source;

-- name: touch_thread
-- The bot posted in or was mentioned in a thread: its replies reach the agent, and the thread
-- counts as active from now for the retention (renewed at most hourly: a busy thread's posts
-- do not each rewrite its row).
INSERT INTO threads (channel, thread_ts, why, created_at, last_at)
VALUES (:channel, :thread_ts, :why, :now, :now)
ON CONFLICT (channel, thread_ts) DO UPDATE SET last_at = excluded.last_at
WHERE threads.last_at < excluded.last_at - 3600;

-- name: known_thread
-- Whether the bot takes part in a thread (by its primary key).
SELECT why FROM threads WHERE channel = :channel AND thread_ts = :thread_ts;

-- name: note_home_opened
-- A person opened their Home tab: keep it fresh from now on.
INSERT INTO app_homes (inbox, opened_at) VALUES (:inbox, :now)
ON CONFLICT (inbox) DO UPDATE SET opened_at = excluded.opened_at;

-- name: has_opened_home
-- Whether a person ever opened their Home tab (by primary key).
SELECT opened_at FROM app_homes WHERE inbox = :inbox;

-- name: save_installation
-- Store a workspace's installation as active, or replace it (a re-install); its version.
INSERT INTO installations (workspace, enterprise_id, team_id, org_wide, profile, secrets,
                           expires_at, version, status, reason, installed_at, updated_at)
VALUES (:workspace, :enterprise_id, :team_id, :org_wide, :profile, :secrets, :expires_at, 1,
        'active', NULL, :now, :now)
ON CONFLICT (workspace) DO UPDATE SET
    enterprise_id = excluded.enterprise_id, team_id = excluded.team_id,
    org_wide = excluded.org_wide, profile = excluded.profile, secrets = excluded.secrets,
    expires_at = excluded.expires_at, version = installations.version + 1, status = 'active',
    reason = NULL, installed_at = excluded.installed_at, updated_at = excluded.updated_at
RETURNING version;

-- name: get_installation
-- One workspace's installation, any status.
SELECT * FROM installations WHERE workspace = :workspace;

-- name: team_installation
-- The org-wide installation a team was seen under.
SELECT i.* FROM installation_teams t JOIN installations i ON i.workspace = t.workspace
WHERE t.team_id = :team_id;

-- name: list_installations
-- Every installation, by workspace.
SELECT * FROM installations ORDER BY workspace;

-- name: count_installations
-- How many workspaces have the app installed now.
SELECT COUNT(*) AS n FROM installations WHERE status = 'active';

-- name: note_team
-- Record the org-wide installation a team belongs to.
INSERT INTO installation_teams (team_id, workspace) VALUES (:team_id, :workspace)
ON CONFLICT (team_id) DO UPDATE SET workspace = excluded.workspace;

-- name: workspace_teams
-- The teams seen under an org-wide installation.
SELECT team_id FROM installation_teams WHERE workspace = :workspace ORDER BY team_id;

-- name: refresh_secrets
-- Refreshed tokens, written only over the version they were refreshed from (the fence of a
-- refresh: a second refresher finds the version moved and writes nothing).
UPDATE installations
SET secrets = :secrets, profile = :profile, expires_at = :expires_at, version = version + 1,
    updated_at = :now
WHERE workspace = :workspace AND version = :version AND status = 'active';

-- name: end_installation
-- Tokens revoked or the app uninstalled: the tokens go, the status and reason stay (an
-- uninstall stands over a revocation, whichever came first); a notice older than the
-- installation (Slack retrying one from before a re-install) changes nothing.
UPDATE installations
SET status = CASE WHEN status = 'uninstalled' THEN 'uninstalled' ELSE :status END,
    reason = CASE WHEN status = 'uninstalled' AND :status = 'revoked' THEN reason
                  ELSE :reason END,
    secrets = :secrets, expires_at = NULL, version = version + 1, updated_at = :now
WHERE workspace = :workspace AND installed_at <= :issued_at;

-- name: park_workspace_outbox
-- An ended workspace's rows still waiting: parked with the reason, for the operator.
UPDATE outbox SET status = 'failed', error = :error
WHERE status IN ('pending', 'sending') AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix;

-- name: cancel_workspace_timers
-- An ended workspace's timers, but not its approvals' expiries (no approval stays open).
DELETE FROM timers
WHERE substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
  AND substr(id, LENGTH(inbox) + 2, 9) <> 'approval:';

-- name: workspace_inboxes
-- The inboxes of a team that have work, a session, a timer or an open approval.
SELECT inbox FROM events
WHERE status IN ('pending', 'running') AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
UNION SELECT inbox FROM sessions WHERE substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
UNION SELECT inbox FROM timers WHERE substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix
UNION SELECT inbox FROM approvals
WHERE answer IS NULL AND substr(inbox, 1, CAST(:n AS INTEGER)) = :prefix;

-- name: set_inbox_aside
-- Hold an inbox of an ended workspace: a lease of its own that lapses only on re-install
-- (a run in flight there loses its lease, so its finish writes nothing). No process holds
-- it, so none's end ends it.
INSERT INTO leases (inbox, holder, gen, expires_at, seq)
VALUES (:inbox, :holder, 1, :until, 1)
ON CONFLICT (inbox) DO UPDATE SET
    holder = excluded.holder, gen = leases.gen + 1, expires_at = excluded.expires_at,
    seq = leases.seq + 1, process = NULL;

-- name: resume_workspace
-- A workspace installed again: the leases that held its inboxes lapse now.
UPDATE leases SET expires_at = :now WHERE holder = :holder AND expires_at > :now;

-- name: insert_oauth_state
-- An OAuth state value handed out, until its expiry.
INSERT INTO oauth_states (state, expires_at) VALUES (:state, :expires_at);

-- name: consume_oauth_state
-- Take a state value once: deleted as it is read, found only before its expiry.
DELETE FROM oauth_states WHERE state = :state AND expires_at > :now RETURNING state;

-- name: prune_oauth_states
-- Drop the state values whose time is over.
DELETE FROM oauth_states WHERE expires_at <= :now;

-- name: revoke_destination
-- Revoke a gateway destination (the kill switch); a second revoke keeps the first row.
INSERT INTO gateway_revocations (destination, revoked_at, revoked_by, reason)
VALUES (:destination, :now, :by, :reason)
ON CONFLICT (destination) DO NOTHING;

-- name: restore_destination
-- Lift a gateway destination's revocation.
DELETE FROM gateway_revocations WHERE destination = :destination;

-- name: revoked_destinations
-- Every revoked gateway destination: what each gateway polls, a tiny table.
SELECT * FROM gateway_revocations ORDER BY destination;

-- Restore (issue 27): what `wakeful restore` marks so replies Slack shows are not posted again.

-- name: insert_restore
-- Record a restore: rows of the copy are looked for in Slack before they are posted.
INSERT INTO restores (restored_at, source, leases_expired, rows_to_check)
VALUES (:now, :source, :leases, :rows);

-- name: expire_all_leases
-- At restore: the copy's leases are over (their holders are gone), so inboxes do not wait.
UPDATE leases SET expires_at = :now WHERE expires_at > :now;

-- name: release_copied_sends
-- At restore: batches the copy shows in flight are due again at once (and looked for first).
UPDATE outbox SET in_flight_until = :now
WHERE status = 'sending' AND in_flight_until > :now;

-- name: look_first_open_rows
-- At restore: every row the copy has not sent may already be in Slack.
UPDATE outbox SET look_first = 1 WHERE status IN ('pending', 'sending');

-- name: last_restore
-- When the store was last restored (none: NULL).
SELECT MAX(restored_at) AS restored_at FROM restores;

-- Attempts and dead-letter operations (issue 27): each failed attempt's error, the operator's
-- bulk discard and requeue, audited.

-- name: insert_attempt
-- One attempt that did not end well, with its error, bounded traceback and run's trace.
INSERT INTO attempts (event_id, inbox, attempt, run_id, started_ms, finished_ms, outcome,
                      error_type, message, traceback, trace)
VALUES (:event_id, :inbox, :attempt, :run_id, :started_ms, :finished_ms, :outcome,
        :error_type, :message, :traceback, :trace);

-- name: event_attempts
-- One event's recorded attempts, in order.
SELECT * FROM attempts WHERE event_id = :id ORDER BY attempt, id;

-- name: insert_operation
-- Audit an operator's action on dead events before its first batch.
INSERT INTO operations (action, actor, filter, touched, at)
VALUES (:action, :actor, :filter, 0, :now)
RETURNING id;

-- name: count_operation
-- Count one batch of an operator's action, in the batch's transaction.
UPDATE operations SET touched = touched + :n WHERE id = :id;

-- name: recent_operations
-- The latest operator actions on dead events, newest first.
SELECT * FROM operations ORDER BY id DESC LIMIT :limit;

-- name: ready_inboxes
-- Inboxes with claimable work and no live lease, oldest work first, the workspaces taking
-- turns (the oldest inbox of each, then the next of each: one workspace's flood does not
-- push another's inboxes past the limit); `top` is the newest event id stored (the same on
-- every row). A workspace is the `<team>:` its inbox keys start with (InboxId.team_prefix).
SELECT inbox, first, top FROM (
    SELECT e.inbox, MIN(e.id) AS first, (SELECT MAX(id) FROM events) AS top,
           ROW_NUMBER() OVER (
               PARTITION BY substr(e.inbox, 1, instr(e.inbox, ':')) ORDER BY MIN(e.id)
           ) AS turn
    FROM events e
    WHERE e.status IN ('pending', 'running')
      AND (e.status = 'running' OR e.not_before <= :now)
      AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.inbox = e.inbox AND l.expires_at > :now)
    GROUP BY e.inbox
) ready
ORDER BY turn, first
LIMIT :limit;

-- name: open_destinations
-- Destinations with pending or sending rows, oldest first, the workspaces (of their rows'
-- inboxes) taking turns, but none with a batch still in flight (its deadline not passed):
-- those have nothing to claim yet.
SELECT channel, thread_ts, first FROM (
    SELECT channel, thread_ts, first,
           ROW_NUMBER() OVER (PARTITION BY workspace ORDER BY first) AS turn
    FROM (
        SELECT channel, thread_ts, MIN(id) AS first,
               substr(MIN(inbox), 1, instr(MIN(inbox), ':')) AS workspace
        FROM outbox
        WHERE status IN ('pending', 'sending')
        GROUP BY channel, thread_ts
        HAVING MAX(CASE WHEN status = 'sending' AND in_flight_until > :now THEN 1 ELSE 0 END) = 0
    ) open_now
) turns
ORDER BY turn, first
LIMIT :limit;

-- name: register_process
-- A process says it runs (again, after it was judged dead: same row, seen now).
INSERT INTO processes (id, host, boot, pid, pid_start, role, started_at, seen_at)
VALUES (:id, :host, :boot, :pid, :pid_start, :role, :started_at, :now)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at;

-- name: beat_process
-- A process's heartbeat: it is alive now (no row: it was judged dead meanwhile).
UPDATE processes SET seen_at = :now WHERE id = :id;

-- name: processes_here
-- The processes of one host's boot and pid namespace: their pids can be checked from here.
SELECT * FROM processes WHERE host = :host AND boot = :boot;

-- name: processes_silent
-- The processes whose latest heartbeat is older than `before`.
SELECT * FROM processes WHERE seen_at < :before;

-- name: forget_dead_process
-- A process judged dead, unless it said it was alive since it was read.
DELETE FROM processes WHERE id = :id AND seen_at = :seen_at;

-- name: forget_process
-- A process that stops cleanly.
DELETE FROM processes WHERE id = :id;

-- name: end_process_leases
-- The live leases of a process that is gone lapse now; their generation stays, so the next
-- holder takes the next one and the gone process's finish is refused as before.
UPDATE leases SET expires_at = :now WHERE process = :process AND expires_at > :now
RETURNING inbox;

-- name: due_running_events
-- The events a gone process was running in an inbox are due at once (the attempt stays
-- counted): their run ended with its process; the backoff fixed at their claim would add to it.
UPDATE events SET not_before = :now
WHERE status = 'running' AND inbox = :inbox AND not_before > :now;

-- name: all_processes
-- Every process that says it runs, oldest first.
SELECT * FROM processes ORDER BY started_at, id;

-- name: lease_process
-- The process holding an inbox's live lease, if it recorded itself.
SELECT p.* FROM leases l JOIN processes p ON p.id = l.process
WHERE l.inbox = :inbox AND l.expires_at > :now;

-- name: memory_doc
-- A memory document's current text (NULL: deleted).
SELECT text FROM memories WHERE owner = :owner AND path = :path AND latest = 1;

-- name: memory_paths
-- The documents an owner keeps under a folder (the memories_current index).
SELECT path FROM memories
WHERE owner = :owner AND latest = 1 AND text IS NOT NULL
  AND (path = :folder OR path LIKE :prefix ESCAPE '\')
ORDER BY path;

-- name: memory_docs
-- What an owner keeps now, without the text (`wakeful inspect --memory`).
SELECT path, bytes, version, written_at FROM memories
WHERE owner = :owner AND latest = 1 AND text IS NOT NULL
ORDER BY path;

-- name: memory_versions
-- Every version kept of one document, oldest first.
SELECT version, text, written_at FROM memories
WHERE owner = :owner AND path = :path
ORDER BY version;

-- name: memory_version
-- One kept version of a document (to restore it).
SELECT text FROM memories WHERE owner = :owner AND path = :path AND version = :version;

-- name: memory_latest
-- A document's newest version number.
SELECT version FROM memories WHERE owner = :owner AND path = :path AND latest = 1;

-- name: memory_unmark_latest
-- The newest version is about to be followed by another.
UPDATE memories SET latest = 0 WHERE owner = :owner AND path = :path AND latest = 1;

-- name: insert_memory
-- A new version of a memory document, the newest.
INSERT INTO memories (owner, path, version, text, bytes, latest, written_at, run_id)
VALUES (:owner, :path, :version, :text, :bytes, 1, :now, :run_id);

-- name: forget_count_documents
-- The documents an inbox keeps now (what a forget reports erased).
SELECT COUNT(*) AS n FROM memories WHERE owner = :inbox AND latest = 1 AND text IS NOT NULL;

-- name: forget_memories
-- Every version of every memory document of the inbox.
DELETE FROM memories WHERE owner = :inbox;

-- name: forget_attempts
-- What the attempts log kept of the inbox's failures (an error can quote the person).
UPDATE attempts SET message = NULL, traceback = NULL
WHERE event_id IN (
    SELECT id FROM events
    WHERE status IN ('pending', 'running', 'done', 'dead', 'discarded') AND inbox = :inbox
) AND (message IS NOT NULL OR traceback IS NOT NULL);

-- name: forget_events
-- The text of the inbox's events: the rows stay (counts, keys and guarantees hold), their
-- payload replaced; what had not run yet is discarded, never run on erased text.
UPDATE events
SET payload = :erased, error = NULL, traceback = NULL, waiting_since = NULL,
    status = CASE WHEN status IN ('pending', 'running', 'dead') THEN 'discarded' ELSE status END,
    updated_at = :now
WHERE status IN ('pending', 'running', 'done', 'dead', 'discarded') AND inbox = :inbox
  AND payload <> :erased;

-- name: forget_outbox
-- The text of the inbox's outbox rows: the rows stay, their text replaced; one not yet sent
-- is not sent (failed, saying why).
UPDATE outbox
SET text = '', blocks = NULL, facts = NULL, answers = NULL,
    error = CASE WHEN status = 'pending' THEN :why ELSE NULL END,
    status = CASE WHEN status = 'pending' THEN 'failed' ELSE status END
WHERE inbox = :inbox
  AND (text <> '' OR blocks IS NOT NULL OR facts IS NOT NULL OR answers IS NOT NULL
       OR error IS NOT NULL);

-- name: forget_sessions
-- The saved conversation.
DELETE FROM sessions WHERE inbox = :inbox;

-- name: forget_set_aside_sessions
-- Conversations set aside for the operator.
DELETE FROM set_aside_sessions WHERE inbox = :inbox;

-- name: forget_recorded_calls
-- Recorded model calls, streams and carries: each holds the person's words.
DELETE FROM steps
WHERE inbox = :inbox AND (replay = 1 OR name LIKE 'stream:%' OR name LIKE 'claude:%');

-- name: forget_step_args
-- The other steps keep their keys (a refund is never made twice), not their arguments or
-- results (either can quote the person).
UPDATE steps SET args = NULL, error = NULL, result = :erased
WHERE inbox = :inbox AND (args IS NOT NULL OR error IS NOT NULL OR result <> :erased);

-- name: forget_timers
-- The inbox's timers (a reminder holds its text).
DELETE FROM timers WHERE inbox = :inbox;

-- name: forget_approvals
-- The inbox's approvals: their arguments and summaries go; an open one is closed, expired.
UPDATE approvals
SET args = '{}', summary = NULL, tool_error = NULL,
    answer = COALESCE(answer, 'expired'), answered_at = COALESCE(answered_at, :now),
    tool_state = CASE WHEN tool_state = 'waiting' THEN 'given_up' ELSE tool_state END
WHERE inbox = :inbox;

-- name: expire_lease
-- A worker running the inbox is fenced: its finish changes nothing, its steps are refused.
UPDATE leases SET expires_at = 0, holder = 'forgotten' WHERE inbox = :inbox;

-- name: insert_forget
-- The audit line of one erasure, without what was erased: its files not yet scrubbed (every
-- table it rewrote rows of is named in `unscrubbed`; `erase_xid`: PostgreSQL's erasing
-- transaction, NULL on SQLite).
INSERT INTO forgets (inbox, asked_by, forgotten_at, documents, versions, events, outbox,
                     unscrubbed, erase_xid)
VALUES (:inbox, :asked_by, :now, :documents, :versions, :events, :outbox, :unscrubbed, :xid);

-- name: forgets_of
-- The audit lines of an inbox's erasures, oldest first; `scrubbed_at` NULL while the store's
-- files may still hold what went.
SELECT id, inbox, asked_by, forgotten_at, documents, versions, events, outbox, scrubbed_at
FROM forgets WHERE inbox = :inbox ORDER BY id;

-- name: unscrubbed_forgets
-- The erasures whose files are not scrubbed yet, with the tables left (the scheduler's retry
-- looks every few seconds: through the partial index, a look at nothing when all are done).
SELECT id, unscrubbed, erase_xid FROM forgets WHERE scrubbed_at IS NULL ORDER BY id;

-- name: set_unscrubbed
-- The tables an erasure's scrub still has to do, and when it was done (none left; else NULL).
-- A row another scrubber finished meanwhile stays finished.
UPDATE forgets SET unscrubbed = :unscrubbed, scrubbed_at = :scrubbed_at
WHERE id = :id AND scrubbed_at IS NULL;

-- name: export_memories
-- Every kept version of every memory document of an inbox (`wakeful export`).
SELECT path, version, text, written_at, latest FROM memories
WHERE owner = :inbox ORDER BY path, version;

-- name: export_events
-- An inbox's stored events (`wakeful export`).
SELECT id, source, source_id, payload, status, created_at FROM events
WHERE status IN ('pending', 'running', 'done', 'dead', 'discarded') AND inbox = :inbox
ORDER BY id;

-- name: export_outbox
-- An inbox's outbox rows (`wakeful export`).
SELECT id, kind, channel, thread_ts, text, status, created_at, sent_at FROM outbox
WHERE inbox = :inbox ORDER BY id;

-- name: export_session
-- An inbox's saved conversation (`wakeful export`).
SELECT state, updated_at FROM sessions WHERE inbox = :inbox;

-- name: export_timers
-- An inbox's timers (`wakeful export`).
SELECT id, kind, payload, next_at FROM timers WHERE inbox = :inbox ORDER BY id;

-- name: export_approvals
-- An inbox's approvals (`wakeful export`).
SELECT id, tool, args, summary, answer, created_at FROM approvals
WHERE inbox = :inbox ORDER BY created_at, id;
