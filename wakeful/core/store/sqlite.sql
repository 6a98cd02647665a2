-- Every statement the SQLite store runs, by name. Parameters are :named.

-- name: ping
SELECT 1 AS ok;

-- name: insert_event
INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at)
VALUES (:inbox, :source, :source_id, :payload, :now, :now)
ON CONFLICT (source, source_id) DO NOTHING
RETURNING id;

-- name: get_event
SELECT * FROM events WHERE id = :id;

-- name: get_event_by_key
SELECT * FROM events WHERE source = :source AND source_id = :source_id;

-- name: inbox_events
SELECT * FROM events
WHERE status IN ('pending', 'running', 'done', 'dead') AND inbox = :inbox
ORDER BY id;

-- name: open_events
SELECT * FROM events
WHERE inbox = :inbox AND status IN ('pending', 'running')
ORDER BY id;

-- name: count_events
SELECT COUNT(*) AS n FROM events WHERE :status IS NULL OR status = :status;

-- name: ready_inboxes
SELECT e.inbox, MIN(e.id) AS first
FROM events e
WHERE e.status IN ('pending', 'running')
  AND (e.status = 'running' OR e.not_before <= :now)
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.inbox = e.inbox AND l.expires_at > :now)
GROUP BY e.inbox
ORDER BY first
LIMIT :limit;

-- name: get_lease_for_update
SELECT * FROM leases WHERE inbox = :inbox;

-- name: get_lease
SELECT * FROM leases WHERE inbox = :inbox;

-- name: get_lease_for_acquire
SELECT * FROM leases WHERE inbox = :inbox;

-- name: lease_row_exists
SELECT 1 AS ok FROM leases WHERE inbox = :inbox;

-- name: update_lease
UPDATE leases SET holder = :holder, gen = :gen, expires_at = :expires_at WHERE inbox = :inbox;

-- name: reset_stale
UPDATE events SET status = 'pending', updated_at = :now
WHERE inbox = :inbox AND status = 'running' AND gen <> :gen;

-- name: bury_exhausted
UPDATE events SET status = 'dead', error = :error, updated_at = :now
WHERE inbox = :inbox AND status = 'pending'
  AND attempts >= :max_attempts;

-- name: mark_running
UPDATE events
SET status = 'running', gen = :gen, attempts = :attempts, not_before = :not_before,
    updated_at = :now
WHERE id = :id;

-- name: dead_events
SELECT * FROM events WHERE status = 'dead' ORDER BY id LIMIT :limit;

-- name: inbox_dead_events
SELECT * FROM events WHERE status = 'dead' AND inbox = :inbox ORDER BY id;

-- name: requeue_event
UPDATE events SET status = 'pending', attempts = 0, not_before = 0, error = NULL, gen = 0,
    updated_at = :now
WHERE id = :id AND status = 'dead';

-- name: upsert_session
INSERT INTO sessions (inbox, state, updated_at) VALUES (:inbox, :state, :now)
ON CONFLICT (inbox) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at;

-- name: get_session
SELECT state FROM sessions WHERE inbox = :inbox;

-- name: upsert_timer
INSERT INTO timers (id, inbox, kind, action, next_at, anchor, every_seconds, daily_at, tz,
                    policy, payload, created_at)
VALUES (:id, :inbox, :kind, :action, :next_at, :anchor, :every_seconds, :daily_at, :tz,
        :policy, :payload, :now)
ON CONFLICT (id) DO UPDATE SET
    inbox = excluded.inbox, kind = excluded.kind, action = excluded.action,
    next_at = excluded.next_at, anchor = excluded.anchor,
    every_seconds = excluded.every_seconds, daily_at = excluded.daily_at, tz = excluded.tz,
    policy = excluded.policy, payload = excluded.payload;

-- name: delete_timer
DELETE FROM timers WHERE id = :id;

-- name: inbox_timers
SELECT * FROM timers WHERE inbox = :inbox ORDER BY next_at, id;

-- name: next_timer_at
SELECT MIN(next_at) AS next_at FROM timers;

-- name: due_timers
SELECT * FROM timers WHERE next_at <= :now ORDER BY next_at, id LIMIT :limit;

-- name: advance_timer
UPDATE timers SET next_at = :next_at WHERE id = :id;

-- name: insert_approval
INSERT INTO approvals (id, inbox, tool, args, requester, approvers, deadline, created_at)
VALUES (:id, :inbox, :tool, :args, :requester, :approvers, :deadline, :now)
ON CONFLICT (id) DO NOTHING;

-- name: get_approval_for_update
SELECT * FROM approvals WHERE id = :id;

-- name: get_approval
SELECT * FROM approvals WHERE id = :id;

-- name: set_answer
UPDATE approvals SET answer = :answer, answered_by = :user, answered_at = :now
WHERE id = :id AND answer IS NULL;

-- name: inbox_approvals
SELECT * FROM approvals WHERE inbox = :inbox ORDER BY created_at, id;

-- name: set_prompt
UPDATE approvals SET prompt_channel = :channel, prompt_ts = :ts WHERE id = :id;

-- name: insert_outbox
INSERT INTO outbox (inbox, kind, channel, thread_ts, text, blocks, priority, ref, user_id,
                    created_at)
VALUES (:inbox, :kind, :channel, :thread_ts, :text, :blocks, :priority, :ref, :user_id, :now);

-- name: open_destinations
SELECT channel, thread_ts, MIN(id) AS first
FROM outbox
WHERE status IN ('pending', 'sending')
GROUP BY channel, thread_ts
ORDER BY first
LIMIT :limit;

-- name: open_rows
SELECT * FROM outbox
WHERE channel = :channel AND thread_ts = :thread_ts AND status IN ('pending', 'sending')
ORDER BY id
LIMIT :limit;

-- name: get_destination
SELECT last_sent_at FROM destinations WHERE channel = :channel AND thread_ts = :thread_ts;

-- name: touch_destination
INSERT INTO destinations (channel, thread_ts, last_sent_at) VALUES (:channel, :thread_ts, :now)
ON CONFLICT (channel, thread_ts) DO UPDATE SET last_sent_at = excluded.last_sent_at;

-- name: claim_row
UPDATE outbox
SET status = 'sending', dispatch_id = :dispatch_id, in_flight_until = :until,
    attempts = attempts + 1
WHERE id = :id AND status = 'pending';

-- name: reclaim_batch
UPDATE outbox SET in_flight_until = :until, attempts = attempts + 1
WHERE dispatch_id = :dispatch_id AND status = 'sending' AND in_flight_until <= :now;

-- name: defer_batch
UPDATE outbox SET in_flight_until = :until, error = :error
WHERE dispatch_id = :dispatch_id AND status = 'sending';

-- name: mark_row_sent
UPDATE outbox SET status = 'sent', sent_at = :now, posted_ts = :ts, error = NULL
WHERE id = :id AND dispatch_id = :dispatch_id AND status = 'sending';

-- name: fail_row
UPDATE outbox SET status = 'failed', error = :error
WHERE id = :id AND dispatch_id = :dispatch_id AND status = 'sending';

-- name: all_outbox
SELECT * FROM outbox WHERE :status IS NULL OR status = :status ORDER BY id;

-- name: inbox_outbox
SELECT * FROM outbox WHERE inbox = :inbox ORDER BY id;

-- name: failed_outbox
SELECT * FROM outbox WHERE status = 'failed' ORDER BY id LIMIT :limit;

-- name: requeue_outbox
UPDATE outbox
SET status = 'pending', attempts = 0, dispatch_id = NULL, in_flight_until = 0, error = NULL
WHERE id = :id AND status = 'failed';

-- name: insert_tool_call
INSERT INTO tool_calls (key, tool, inbox, args, created_at)
VALUES (:key, :tool, :inbox, :args, :now)
ON CONFLICT (key) DO NOTHING;

-- name: list_tool_calls
SELECT * FROM tool_calls
WHERE (:tool IS NULL OR tool = :tool) AND (:inbox IS NULL OR inbox = :inbox)
ORDER BY created_at, key;

-- name: lock_destination
-- BEGIN IMMEDIATE already serialises dispatchers.
SELECT 1 AS ok;

-- name: notify_work
-- Not used: SQLite has no cross-process notification; workers poll.
SELECT 1 AS ok;

-- name: next_lease_seq
UPDATE leases SET seq = seq + 1 WHERE inbox = :inbox RETURNING seq;

-- name: insert_run
INSERT INTO runs (inbox, holder, gen, claim_seq, finish_seq, events, claimed_at, finished_at)
VALUES (:inbox, :holder, :gen, :claim_seq, :finish_seq, :events,
        :claimed_at, :now);

-- name: inbox_runs
SELECT * FROM runs WHERE inbox = :inbox ORDER BY claim_seq;

-- name: all_runs
SELECT * FROM runs ORDER BY inbox, claim_seq;

-- Group commit: a batch of N concurrent ingests is one existence check and one multi-row
-- insert. The statements below are fragments joined N times with "," by the store (each
-- fragment fully parameterised), so the leader crosses into SQLite twice per batch, not 2N.

-- name: existing_keys_head
SELECT source_id FROM events WHERE source = ? AND source_id IN (

-- name: existing_keys_row
?

-- name: existing_keys_tail
)

-- name: insert_events_head
INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at) VALUES

-- name: insert_events_row
(?, ?, ?, ?, ?, ?)

-- name: next_claimable
-- Retried events first (one is claimed alone), then fresh ones in arrival order.
SELECT * FROM events
WHERE inbox = :inbox AND status = 'pending'
  AND not_before <= :now
ORDER BY attempts > 0 DESC, id
LIMIT :limit;

-- name: take_lease
UPDATE leases SET holder = :holder, gen = :gen, expires_at = :expires_at, seq = seq + 1
WHERE inbox = :inbox
RETURNING seq;

-- name: create_lease
INSERT INTO leases (inbox, holder, gen, expires_at, seq)
VALUES (:inbox, :holder, :gen, :expires_at, 1)
ON CONFLICT (inbox) DO NOTHING
RETURNING seq;

-- name: mark_done_fenced
UPDATE events SET status = 'done', error = NULL, updated_at = :now
WHERE id = :id AND status = 'running' AND gen = :gen;

-- name: mark_failed_fenced
UPDATE events
SET status = 'pending', error = :error, updated_at = :now,
    not_before = MAX(not_before, :not_before)
WHERE id = :id AND status = 'running' AND gen = :gen;
