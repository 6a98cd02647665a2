-- Every statement the PostgreSQL store runs, by name. Parameters are %(named)s.
-- Times are bigint seconds passed in by the caller: no statement reads NOW().

-- name: ping
SELECT 1 AS ok;

-- name: insert_event
INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at)
VALUES (%(inbox)s, %(source)s, %(source_id)s, %(payload)s, %(now)s, %(now)s)
ON CONFLICT (source, source_id) DO NOTHING
RETURNING id;

-- name: get_event
SELECT * FROM events WHERE id = %(id)s;

-- name: get_event_by_key
SELECT * FROM events WHERE source = %(source)s AND source_id = %(source_id)s;

-- name: inbox_events
SELECT * FROM events
WHERE status IN ('pending', 'running', 'done', 'dead') AND inbox = %(inbox)s
ORDER BY id;

-- name: open_events
SELECT * FROM events
WHERE inbox = %(inbox)s AND status IN ('pending', 'running')
ORDER BY id;

-- name: count_events
SELECT COUNT(*) AS n FROM events WHERE %(status)s::text IS NULL OR status = %(status)s::text;

-- name: ready_inboxes
SELECT e.inbox, MIN(e.id) AS first
FROM events e
WHERE e.status IN ('pending', 'running')
  AND (e.status = 'running' OR e.not_before <= %(now)s)
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.inbox = e.inbox AND l.expires_at > %(now)s)
GROUP BY e.inbox
ORDER BY first
LIMIT %(limit)s;

-- name: get_lease_for_update
SELECT * FROM leases WHERE inbox = %(inbox)s FOR UPDATE;

-- name: get_lease_for_acquire
-- A worker pool must not queue behind each other: a lease row another transaction is
-- working on is skipped, and the acquire is refused as if held.
SELECT * FROM leases WHERE inbox = %(inbox)s FOR UPDATE SKIP LOCKED;

-- name: lease_row_exists
SELECT 1 AS ok FROM leases WHERE inbox = %(inbox)s;

-- name: get_lease
SELECT * FROM leases WHERE inbox = %(inbox)s;

-- name: update_lease
UPDATE leases SET holder = %(holder)s, gen = %(gen)s, expires_at = %(expires_at)s WHERE inbox = %(inbox)s;

-- name: reset_stale
UPDATE events SET status = 'pending', updated_at = %(now)s
WHERE inbox = %(inbox)s AND status = 'running' AND gen <> %(gen)s;

-- name: bury_exhausted
UPDATE events SET status = 'dead', error = %(error)s, updated_at = %(now)s
WHERE inbox = %(inbox)s AND status = 'pending'
  AND attempts >= %(max_attempts)s;

-- name: mark_running
UPDATE events
SET status = 'running', gen = %(gen)s, attempts = %(attempts)s, not_before = %(not_before)s,
    updated_at = %(now)s
WHERE id = %(id)s;

-- name: dead_events
SELECT * FROM events WHERE status = 'dead' ORDER BY id LIMIT %(limit)s;

-- name: inbox_dead_events
SELECT * FROM events WHERE status = 'dead' AND inbox = %(inbox)s ORDER BY id;

-- name: requeue_event
UPDATE events SET status = 'pending', attempts = 0, not_before = 0, error = NULL, gen = 0,
    updated_at = %(now)s
WHERE id = %(id)s AND status = 'dead';

-- name: upsert_session
INSERT INTO sessions (inbox, state, updated_at) VALUES (%(inbox)s, %(state)s, %(now)s)
ON CONFLICT (inbox) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at;

-- name: get_session
SELECT state FROM sessions WHERE inbox = %(inbox)s;

-- name: upsert_timer
INSERT INTO timers (id, inbox, kind, action, next_at, anchor, every_seconds, daily_at, tz,
                    policy, payload, created_at)
VALUES (%(id)s, %(inbox)s, %(kind)s, %(action)s, %(next_at)s, %(anchor)s, %(every_seconds)s, %(daily_at)s, %(tz)s,
        %(policy)s, %(payload)s, %(now)s)
ON CONFLICT (id) DO UPDATE SET
    inbox = excluded.inbox, kind = excluded.kind, action = excluded.action,
    next_at = excluded.next_at, anchor = excluded.anchor,
    every_seconds = excluded.every_seconds, daily_at = excluded.daily_at, tz = excluded.tz,
    policy = excluded.policy, payload = excluded.payload;

-- name: delete_timer
DELETE FROM timers WHERE id = %(id)s;

-- name: inbox_timers
SELECT * FROM timers WHERE inbox = %(inbox)s ORDER BY next_at, id;

-- name: next_timer_at
SELECT MIN(next_at) AS next_at FROM timers;

-- name: due_timers
SELECT * FROM timers WHERE next_at <= %(now)s ORDER BY next_at, id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: advance_timer
UPDATE timers SET next_at = %(next_at)s WHERE id = %(id)s;

-- name: insert_approval
INSERT INTO approvals (id, inbox, tool, args, requester, approvers, deadline, created_at)
VALUES (%(id)s, %(inbox)s, %(tool)s, %(args)s, %(requester)s, %(approvers)s, %(deadline)s, %(now)s)
ON CONFLICT (id) DO NOTHING;

-- name: get_approval_for_update
SELECT * FROM approvals WHERE id = %(id)s FOR UPDATE;

-- name: get_approval
SELECT * FROM approvals WHERE id = %(id)s;

-- name: set_answer
UPDATE approvals SET answer = %(answer)s, answered_by = %(user)s, answered_at = %(now)s
WHERE id = %(id)s AND answer IS NULL;

-- name: inbox_approvals
SELECT * FROM approvals WHERE inbox = %(inbox)s ORDER BY created_at, id;

-- name: set_prompt
UPDATE approvals SET prompt_channel = %(channel)s, prompt_ts = %(ts)s WHERE id = %(id)s;

-- name: insert_outbox
INSERT INTO outbox (inbox, kind, channel, thread_ts, text, blocks, priority, ref, user_id,
                    created_at)
VALUES (%(inbox)s, %(kind)s, %(channel)s, %(thread_ts)s, %(text)s, %(blocks)s, %(priority)s, %(ref)s, %(user_id)s, %(now)s);

-- name: open_destinations
SELECT channel, thread_ts, MIN(id) AS first
FROM outbox
WHERE status IN ('pending', 'sending')
GROUP BY channel, thread_ts
ORDER BY first
LIMIT %(limit)s;

-- name: open_rows
SELECT * FROM outbox
WHERE channel = %(channel)s AND thread_ts = %(thread_ts)s AND status IN ('pending', 'sending')
ORDER BY id
LIMIT %(limit)s;

-- name: get_destination
SELECT last_sent_at FROM destinations WHERE channel = %(channel)s AND thread_ts = %(thread_ts)s;

-- name: touch_destination
INSERT INTO destinations (channel, thread_ts, last_sent_at) VALUES (%(channel)s, %(thread_ts)s, %(now)s)
ON CONFLICT (channel, thread_ts) DO UPDATE SET last_sent_at = excluded.last_sent_at;

-- name: claim_row
UPDATE outbox
SET status = 'sending', dispatch_id = %(dispatch_id)s, in_flight_until = %(until)s,
    attempts = attempts + 1
WHERE id = %(id)s AND status = 'pending';

-- name: reclaim_batch
UPDATE outbox SET in_flight_until = %(until)s, attempts = attempts + 1
WHERE dispatch_id = %(dispatch_id)s AND status = 'sending' AND in_flight_until <= %(now)s;

-- name: defer_batch
UPDATE outbox SET in_flight_until = %(until)s, error = %(error)s
WHERE dispatch_id = %(dispatch_id)s AND status = 'sending';

-- name: mark_row_sent
UPDATE outbox SET status = 'sent', sent_at = %(now)s, posted_ts = %(ts)s, error = NULL
WHERE id = %(id)s AND dispatch_id = %(dispatch_id)s AND status = 'sending';

-- name: fail_row
UPDATE outbox SET status = 'failed', error = %(error)s
WHERE id = %(id)s AND dispatch_id = %(dispatch_id)s AND status = 'sending';

-- name: all_outbox
SELECT * FROM outbox WHERE %(status)s::text IS NULL OR status = %(status)s::text ORDER BY id;

-- name: inbox_outbox
SELECT * FROM outbox WHERE inbox = %(inbox)s ORDER BY id;

-- name: failed_outbox
SELECT * FROM outbox WHERE status = 'failed' ORDER BY id LIMIT %(limit)s;

-- name: requeue_outbox
UPDATE outbox
SET status = 'pending', attempts = 0, dispatch_id = NULL, in_flight_until = 0, error = NULL
WHERE id = %(id)s AND status = 'failed';

-- name: insert_tool_call
INSERT INTO tool_calls (key, tool, inbox, args, created_at)
VALUES (%(key)s, %(tool)s, %(inbox)s, %(args)s, %(now)s)
ON CONFLICT (key) DO NOTHING;

-- name: list_tool_calls
SELECT * FROM tool_calls
WHERE (%(tool)s::text IS NULL OR tool = %(tool)s::text)
  AND (%(inbox)s::text IS NULL OR inbox = %(inbox)s::text)
ORDER BY created_at, key;

-- name: lock_destination
-- One dispatcher per destination at a time; the others skip it instead of waiting.
SELECT pg_try_advisory_xact_lock(hashtextextended(%(channel)s || '/' || %(thread_ts)s, 7)) AS ok;

-- name: notify_work
SELECT pg_notify('wakeful_work', %(inbox)s);

-- name: next_lease_seq
UPDATE leases SET seq = seq + 1 WHERE inbox = %(inbox)s RETURNING seq;

-- name: insert_run
INSERT INTO runs (inbox, holder, gen, claim_seq, finish_seq, events, claimed_at, finished_at)
VALUES (%(inbox)s, %(holder)s, %(gen)s, %(claim_seq)s, %(finish_seq)s, %(events)s,
        %(claimed_at)s, %(now)s);

-- name: inbox_runs
SELECT * FROM runs WHERE inbox = %(inbox)s ORDER BY claim_seq;

-- name: all_runs
SELECT * FROM runs ORDER BY inbox, claim_seq;

-- Group-commit fragments of the SQLite store. PostgreSQL commits concurrent ingests in parallel
-- (and groups their WAL flushes itself), so these are defined for the shared name list only.

-- name: existing_keys_head
SELECT source_id FROM events WHERE source = %s AND source_id IN (

-- name: existing_keys_row
%s

-- name: existing_keys_tail
)

-- name: insert_events_head
INSERT INTO events (inbox, source, source_id, payload, created_at, updated_at) VALUES

-- name: insert_events_row
(%s, %s, %s, %s, %s, %s)

-- name: next_claimable
-- Retried events first (one is claimed alone), then fresh ones in arrival order.
SELECT * FROM events
WHERE inbox = %(inbox)s AND status = 'pending'
  AND not_before <= %(now)s
ORDER BY attempts > 0 DESC, id
LIMIT %(limit)s;

-- name: take_lease
UPDATE leases SET holder = %(holder)s, gen = %(gen)s, expires_at = %(expires_at)s, seq = seq + 1
WHERE inbox = %(inbox)s
RETURNING seq;

-- name: create_lease
INSERT INTO leases (inbox, holder, gen, expires_at, seq)
VALUES (%(inbox)s, %(holder)s, %(gen)s, %(expires_at)s, 1)
ON CONFLICT (inbox) DO NOTHING
RETURNING seq;

-- name: mark_done_fenced
UPDATE events SET status = 'done', error = NULL, updated_at = %(now)s
WHERE id = %(id)s AND status = 'running' AND gen = %(gen)s;

-- name: mark_failed_fenced
UPDATE events
SET status = 'pending', error = %(error)s, updated_at = %(now)s,
    not_before = GREATEST(not_before, %(not_before)s)
WHERE id = %(id)s AND status = 'running' AND gen = %(gen)s;
