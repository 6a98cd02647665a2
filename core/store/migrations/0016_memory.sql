-- Memory (issue 38): what an agent may remember about a person. Documents under paths, per
-- owner (an inbox, or `workspace:<team>` for a workspace's shared store); every write a new
-- version, the previous kept for WAKEFUL_RETENTION (a version can be restored); a delete is a
-- version without text. A run's changes are written by its fenced finish, once.
CREATE TABLE memories (
    owner TEXT NOT NULL,
    path TEXT NOT NULL,
    version BIGINT NOT NULL,
    text TEXT,
    bytes BIGINT NOT NULL,
    latest INTEGER NOT NULL,
    written_at BIGINT NOT NULL,
    run_id TEXT,
    PRIMARY KEY (owner, path, version)
);
-- What an owner keeps now (a run's listing, `wakeful inspect --memory`, the document cap).
CREATE INDEX memories_current ON memories (owner, path) WHERE latest = 1;
-- Versions past their retention, pruned with the run log.
CREATE INDEX memories_old ON memories (written_at) WHERE latest = 0;
