-- The agent boundary (issue 22).
--
-- Durable steps: a tool call's result recorded under its idempotency key, so a retried run
-- gets it back instead of calling again. The refund ledger (`tool_calls`) becomes the first
-- steps: each row keeps its key, tool (as the step's name), inbox and arguments, and its
-- arguments stand as its result.
CREATE TABLE steps (
    key TEXT PRIMARY KEY,
    inbox TEXT,
    name TEXT NOT NULL,
    args TEXT,
    result TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
INSERT INTO steps (key, inbox, name, args, result, created_at)
SELECT key, inbox, tool, args, args, created_at FROM tool_calls;
DROP TABLE tool_calls;
CREATE INDEX steps_inbox ON steps (inbox, name, created_at);
CREATE INDEX steps_name ON steps (name, created_at);

-- An approval knows what it asks (its one-line summary) and where it was asked, so the engine
-- can show the answer where the question was, whoever answers and wherever.
ALTER TABLE approvals ADD COLUMN summary TEXT;
ALTER TABLE approvals ADD COLUMN channel TEXT;
ALTER TABLE approvals ADD COLUMN thread_ts TEXT;
CREATE INDEX approvals_open_requester ON approvals (requester, deadline) WHERE answer IS NULL;

-- A failed run keeps its traceback beside its error (`wakeful inspect <inbox>` shows it).
ALTER TABLE events ADD COLUMN traceback TEXT;

-- The outbox's kinds are the engine's and the Slack edge's business, not the schema's: the
-- CHECK that made every new surface rebuild the table goes (the table is rebuilt one last
-- time, ids kept, since neither dialect drops a CHECK alike).
CREATE TABLE outbox_v9 (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'post',
    channel TEXT NOT NULL,
    thread_ts TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    blocks TEXT,
    facts TEXT,
    priority TEXT NOT NULL CHECK (priority IN ('normal', 'urgent')),
    ref TEXT,
    user_id TEXT,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    dispatch_id TEXT,
    in_flight_until BIGINT NOT NULL DEFAULT 0,
    attempts BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    posted_ts TEXT,
    created_at BIGINT NOT NULL,
    sent_at BIGINT
);
INSERT INTO outbox_v9 (id, inbox, kind, channel, thread_ts, text, blocks, facts, priority, ref,
                       user_id, status, dispatch_id, in_flight_until, attempts, error,
                       posted_ts, created_at, sent_at)
SELECT id, inbox, kind, channel, thread_ts, text, blocks, facts, priority, ref, user_id, status,
       dispatch_id, in_flight_until, attempts, error, posted_ts, created_at, sent_at
FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v9 RENAME TO outbox;
{{RESEQUENCE outbox}}
CREATE INDEX outbox_open ON outbox (channel, thread_ts, id) WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_dispatch ON outbox (dispatch_id) WHERE status = 'sending';
CREATE INDEX outbox_failed ON outbox (id) WHERE status = 'failed';
CREATE INDEX outbox_inbox ON outbox (inbox, id);
CREATE INDEX outbox_sent_age ON outbox (sent_at) WHERE status = 'sent';
