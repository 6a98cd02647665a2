-- Model calls as durable steps, and what they cost (issue 24).
--
-- A run's model usage (tokens by kind and an estimated cost, per model) is logged with the run.
ALTER TABLE runs ADD COLUMN usage TEXT;

-- A step recorded only so that a retried run can replay it (a model's answer) is pruned with
-- the run log once older than the retention; a step that records a side effect (a refund) is
-- kept for good, as before.
ALTER TABLE steps ADD COLUMN replay BIGINT NOT NULL DEFAULT 0;
CREATE INDEX steps_replay_age ON steps (created_at) WHERE replay = 1;
