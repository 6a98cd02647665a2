-- Retention: pruning finds what has aged out through these, oldest first, without reading the
-- rest of history. Each is partial where it can be, so open work never pays for it.
CREATE INDEX events_done_age ON events (updated_at) WHERE status = 'done';
CREATE INDEX outbox_sent_age ON outbox (sent_at) WHERE status = 'sent';
CREATE INDEX runs_age ON runs (finished_at);
CREATE INDEX approvals_answered_age ON approvals (answered_at) WHERE answer IS NOT NULL;
