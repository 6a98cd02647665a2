-- Sessions a run could not use (the model API rejected them, the agent could not decode them),
-- moved aside when their events were dead-lettered: kept for the operator, never read by runs.
CREATE TABLE set_aside_sessions (
    id {{IDENTITY}},
    inbox TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL,
    set_aside_at BIGINT NOT NULL
);
CREATE INDEX set_aside_sessions_inbox ON set_aside_sessions (inbox, id);
