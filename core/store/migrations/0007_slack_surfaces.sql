-- Slack surfaces beyond the conversation (issue 13).
--
-- The outbox takes new kinds: `digest` (a post whose structured facts let held digests merge
-- into one), `respond` (a slash command's ephemeral answer), `home` (the App Home view),
-- `status` (the assistant thread's "is thinking…") and `prompts` (its suggested prompts), and
-- a `facts` column (JSON) for what a kind merges on. Neither dialect can change a CHECK in
-- place alike, so the table is rebuilt with its ids kept (part ids are made of row ids).
CREATE TABLE outbox_v7 (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'post' CHECK (kind IN
        ('post', 'update', 'ephemeral', 'digest', 'respond', 'home', 'status', 'prompts')),
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
INSERT INTO outbox_v7 (id, inbox, kind, channel, thread_ts, text, blocks, priority, ref,
                       user_id, status, dispatch_id, in_flight_until, attempts, error,
                       posted_ts, created_at, sent_at)
SELECT id, inbox, kind, channel, thread_ts, text, blocks, priority, ref, user_id, status,
       dispatch_id, in_flight_until, attempts, error, posted_ts, created_at, sent_at
FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v7 RENAME TO outbox;
{{RESEQUENCE outbox}}
CREATE INDEX outbox_open ON outbox (channel, thread_ts, id) WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_dispatch ON outbox (dispatch_id) WHERE status = 'sending';
CREATE INDEX outbox_failed ON outbox (id) WHERE status = 'failed';
CREATE INDEX outbox_inbox ON outbox (inbox, id);
CREATE INDEX outbox_sent_age ON outbox (sent_at) WHERE status = 'sent';

-- Threads the bot takes part in: a reply there reaches the agent without a new @mention.
-- Written when the bot is mentioned in a thread or posts in one; the listener reads it by its
-- key for every channel message (one indexed read, no write for a message it drops).
CREATE TABLE threads (
    channel TEXT NOT NULL,
    thread_ts TEXT NOT NULL,
    why TEXT NOT NULL CHECK (why IN ('posted', 'mentioned')),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (channel, thread_ts)
);

-- People who opened the App Home tab: only their Home views are refreshed after a run, so a
-- person who never looks costs no views.publish call.
CREATE TABLE app_homes (
    inbox TEXT PRIMARY KEY,
    opened_at BIGINT NOT NULL
);
