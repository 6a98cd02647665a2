-- One index serves claims, ready scans, dead letters and per-inbox history: (status, inbox, id).
-- Claims and the ready scan seek the open statuses only, so done history never slows them;
-- every ingest now updates two indexes instead of three.
DROP INDEX events_open;
DROP INDEX events_inbox;
DROP INDEX events_dead;
CREATE INDEX events_status ON events (status, inbox, id);
