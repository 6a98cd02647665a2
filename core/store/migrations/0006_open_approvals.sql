-- Open approvals (no answer yet) in deadline order, for the operator's view and the metrics
-- scrape: reading them never walks the answered history.
CREATE INDEX approvals_open ON approvals (deadline, id) WHERE answer IS NULL;
