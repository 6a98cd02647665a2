-- Each claim and finish of an inbox takes the next number of its lease's sequence, inside the
-- transaction that holds the lease; the run log keeps both numbers for every finished run, so
-- "two runs of one inbox overlapped and both finished" is a query, not a guess.
ALTER TABLE leases ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE runs (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    holder TEXT NOT NULL,
    gen BIGINT NOT NULL,
    claim_seq BIGINT NOT NULL,
    finish_seq BIGINT NOT NULL,
    events TEXT NOT NULL,
    claimed_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL
);
CREATE INDEX runs_inbox ON runs (inbox, claim_seq);
