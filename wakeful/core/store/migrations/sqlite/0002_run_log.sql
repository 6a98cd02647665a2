-- Each claim and finish of an inbox takes the next number of its lease's sequence, inside the
-- transaction that holds the lease; the run log keeps both numbers for every finished run, so
-- "two runs of one inbox overlapped and both finished" is a query, not a guess.
ALTER TABLE leases ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;

CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    inbox TEXT NOT NULL,
    holder TEXT NOT NULL,
    gen INTEGER NOT NULL,
    claim_seq INTEGER NOT NULL,
    finish_seq INTEGER NOT NULL,
    events TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL
);
CREATE INDEX runs_inbox ON runs (inbox, claim_seq);
