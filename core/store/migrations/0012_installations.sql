-- Distribution mode (issue 26): the app installed in many workspaces.
--
-- One installation per workspace (a team, or an enterprise for an org-wide install). What is
-- not secret (ids, names, scopes, the installer) is kept as JSON in `profile`; the tokens are
-- in `secrets`, encrypted by the edge before they reach the store (the store never sees them
-- in clear). `version` grows with every save: a token refresh is written only over the
-- version it read, so two refreshers can never both land. `status` is active, revoked
-- (tokens_revoked) or uninstalled (app_uninstalled); a row is never deleted, so an operator
-- can see what was installed, and a re-install takes it over again.
CREATE TABLE installations (
    workspace TEXT PRIMARY KEY,
    enterprise_id TEXT,
    team_id TEXT,
    org_wide BIGINT NOT NULL DEFAULT 0,
    profile TEXT NOT NULL,
    secrets TEXT NOT NULL,
    expires_at BIGINT,
    version BIGINT NOT NULL DEFAULT 1,
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked', 'uninstalled')),
    reason TEXT,
    installed_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The workspaces of an org-wide install: a person's inbox names their team, the install
-- names the enterprise; the front records each team it sees under its install.
CREATE TABLE installation_teams (
    team_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL
);

-- OAuth state values handed out by /slack/install: each consumed once, within its expiry.
CREATE TABLE oauth_states (
    state TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX oauth_states_expiry ON oauth_states (expires_at);
