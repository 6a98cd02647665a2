-- Forgetting a person (issue 38): one line per erasure, without any of what was erased
-- (who asked, when, and how much went), so an operator can answer "was it done?".
CREATE TABLE forgets (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    asked_by TEXT NOT NULL,
    forgotten_at BIGINT NOT NULL,
    documents BIGINT NOT NULL,
    versions BIGINT NOT NULL,
    events BIGINT NOT NULL,
    outbox BIGINT NOT NULL
);
CREATE INDEX forgets_inbox ON forgets (inbox, id);
