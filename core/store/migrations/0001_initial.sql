CREATE TABLE events (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'dead')),
    attempts BIGINT NOT NULL DEFAULT 0,
    gen BIGINT NOT NULL DEFAULT 0,
    not_before BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (source, source_id)
);
-- Claims, ready scans and status read only open rows: done history never slows them down.
CREATE INDEX events_open ON events (inbox, id) WHERE status IN ('pending', 'running');
CREATE INDEX events_dead ON events (id) WHERE status = 'dead';
CREATE INDEX events_inbox ON events (inbox, id);

CREATE TABLE leases (
    inbox TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    gen BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE sessions (
    inbox TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE timers (
    id TEXT PRIMARY KEY,
    inbox TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('once', 'every', 'daily')),
    action TEXT NOT NULL DEFAULT 'event' CHECK (action IN ('event', 'expire_approval')),
    next_at BIGINT NOT NULL,
    anchor BIGINT,
    every_seconds BIGINT,
    daily_at TEXT,
    tz TEXT NOT NULL DEFAULT 'UTC',
    policy TEXT NOT NULL CHECK (policy IN ('coalesce', 'catch_up')),
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX timers_due ON timers (next_at);
CREATE INDEX timers_inbox ON timers (inbox);

CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    inbox TEXT NOT NULL,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    requester TEXT NOT NULL,
    approvers TEXT NOT NULL,
    deadline BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    answer TEXT CHECK (answer IN ('yes', 'no', 'expired')),
    answered_by TEXT,
    answered_at BIGINT,
    prompt_channel TEXT,
    prompt_ts TEXT
);
CREATE INDEX approvals_inbox ON approvals (inbox, created_at);

CREATE TABLE outbox (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'post' CHECK (kind IN ('post', 'update', 'ephemeral')),
    channel TEXT NOT NULL,
    thread_ts TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    blocks TEXT,
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
CREATE INDEX outbox_open ON outbox (channel, thread_ts, id) WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_dispatch ON outbox (dispatch_id) WHERE status = 'sending';
CREATE INDEX outbox_failed ON outbox (id) WHERE status = 'failed';
CREATE INDEX outbox_inbox ON outbox (inbox, id);

CREATE TABLE destinations (
    channel TEXT NOT NULL,
    thread_ts TEXT NOT NULL,
    last_sent_at BIGINT NOT NULL,
    PRIMARY KEY (channel, thread_ts)
);

CREATE TABLE tool_calls (
    key TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    inbox TEXT,
    args TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
