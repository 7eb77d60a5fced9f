-- zero-memory schema v2 (PostgreSQL): the OAuth 2.1 authorization server.
-- Timestamps are epoch milliseconds; secrets are stored as sha256 hex only.

-- Clients registered anonymously (RFC 7591). owner_id is the first user who
-- authorized the client; who may use it is in oauth_grants.
CREATE TABLE oauth_clients (
    id TEXT PRIMARY KEY,
    client_name TEXT,
    redirect_uris TEXT NOT NULL,
    owner_id TEXT REFERENCES users(id) ON DELETE SET NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX oauth_clients_owner ON oauth_clients(owner_id);

-- One row per (client, user) that ever authorized; revoked_at ends every
-- token of that pair (a fresh sign-in grants again).
CREATE TABLE oauth_grants (
    client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_authorized_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT,
    PRIMARY KEY (client_id, user_id)
);
CREATE INDEX oauth_grants_user ON oauth_grants(user_id);

-- Single-use authorization codes (5 minutes), bound to client, redirect URI,
-- PKCE challenge, resource and scope. family_id is set once exchanged.
CREATE TABLE oauth_codes (
    code_hash TEXT PRIMARY KEY,
    client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource TEXT,
    scope TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    family_id TEXT
);
CREATE INDEX oauth_codes_pair ON oauth_codes(client_id, user_id);

-- Every access and refresh token descending from one authorization.
CREATE TABLE oauth_families (
    id TEXT PRIMARY KEY,
    client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    resource TEXT,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT,
    revoked_reason TEXT
);
CREATE INDEX oauth_families_pair ON oauth_families(client_id, user_id);

-- OAuth tokens live in access_tokens (kind 'oauth_access' / 'oauth_refresh').
ALTER TABLE access_tokens ADD COLUMN client_id TEXT;
ALTER TABLE access_tokens ADD COLUMN family_id TEXT;
ALTER TABLE access_tokens ADD COLUMN used_at BIGINT;
CREATE INDEX access_tokens_family ON access_tokens(family_id);
