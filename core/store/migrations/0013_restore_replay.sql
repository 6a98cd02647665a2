-- Restore without re-answering (issue 27). Each outbox row names the inbox events it answers
-- (`answers`: a JSON list of `<source>:<source_id>` keys, which a restore does not change), and
-- its Slack post carries them in its metadata. `look_first` marks a row that may answer events
-- Slack already shows answered (written before a restore, or answering events from before
-- one): the dispatcher looks for such a post in the conversation before posting it. Each
-- `wakeful restore` is recorded in `restores`.
ALTER TABLE outbox ADD COLUMN answers TEXT;
ALTER TABLE outbox ADD COLUMN look_first BIGINT NOT NULL DEFAULT 0;
CREATE TABLE restores (
    id {{IDENTITY}},
    restored_at BIGINT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    leases_expired BIGINT NOT NULL DEFAULT 0,
    rows_to_check BIGINT NOT NULL DEFAULT 0
);
