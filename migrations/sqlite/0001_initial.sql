-- zero-memory schema v1 (SQLite). Timestamps are epoch milliseconds; flags are 0/1.
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    is_owner INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);

CREATE TABLE access_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    name TEXT,
    token_hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    last_used_at INTEGER,
    revoked_at INTEGER
);
CREATE INDEX access_tokens_user ON access_tokens(user_id);

CREATE TABLE scopes (
    path TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
);

CREATE TABLE scope_members (
    scope TEXT NOT NULL REFERENCES scopes(path) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (scope, user_id)
);
CREATE INDEX scope_members_user ON scope_members(user_id);

CREATE TABLE project_bindings (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (owner_id, kind, key)
);

CREATE TABLE memories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    visibility TEXT NOT NULL,
    author_kind TEXT NOT NULL,
    agent_name TEXT,
    source TEXT,
    translation_status TEXT NOT NULL DEFAULT 'skipped',
    created_at INTEGER NOT NULL,
    invalidated_at INTEGER,
    invalidated_by TEXT,
    invalidated_by_agent TEXT,
    superseded_by TEXT,
    shared_at INTEGER,
    shared_by TEXT
);
CREATE INDEX memories_owner_created ON memories(owner_id, created_at);
CREATE INDEX memories_live_scope ON memories(scope, created_at) WHERE invalidated_at IS NULL;
CREATE INDEX memories_dedup ON memories(owner_id, scope, content_hash) WHERE invalidated_at IS NULL;

CREATE VIRTUAL TABLE memories_fts USING fts5(
    content,
    content = 'memories',
    content_rowid = 'seq',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.seq, new.content);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.seq, old.content);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.seq, old.content);
    INSERT INTO memories_fts(rowid, content) VALUES (new.seq, new.content);
END;

CREATE TABLE memory_links (
    src TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    dst TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (src, dst, type)
);
CREATE INDEX memory_links_dst ON memory_links(dst);

CREATE TABLE entities (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    match_key TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (scope, match_key, type)
);
CREATE INDEX entities_owner ON entities(owner_id);

CREATE TABLE memory_entities (
    memory_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    PRIMARY KEY (memory_id, entity_id)
);
CREATE INDEX memory_entities_entity ON memory_entities(entity_id);

CREATE TABLE edges (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    src TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    dst TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    weight REAL,
    source_memory TEXT,
    created_at INTEGER NOT NULL,
    UNIQUE (src, dst, type)
);

CREATE TABLE session_threads (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    UNIQUE (owner_id, conversation_id)
);

CREATE TABLE conflicts (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_a TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    memory_b TEXT REFERENCES memories(id) ON DELETE CASCADE,
    verdict TEXT NOT NULL,
    confidence REAL,
    rationale TEXT,
    status TEXT NOT NULL,
    resolution TEXT,
    winner TEXT,
    resolved_by TEXT,
    resolved_at INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX conflicts_owner ON conflicts(owner_id, status, created_at);
CREATE UNIQUE INDEX conflicts_one_pending_challenge ON conflicts(memory_a)
    WHERE status = 'pending' AND verdict = 'challenged';

CREATE TABLE rules (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    memory_id TEXT NOT NULL UNIQUE REFERENCES memories(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    layer TEXT NOT NULL,
    applies_scope TEXT,
    status TEXT NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    promoted_at INTEGER,
    created_at INTEGER NOT NULL,
    revoked_reason TEXT
);
CREATE INDEX rules_owner ON rules(owner_id, status);

CREATE TABLE imports (
    owner_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    source_hash TEXT NOT NULL,
    memory_id TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (owner_id, source_hash)
);

CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    occurred_at INTEGER NOT NULL,
    actor_id TEXT,
    author_kind TEXT,
    agent_name TEXT,
    command TEXT NOT NULL,
    payload TEXT,
    outcome TEXT NOT NULL,
    error_code TEXT,
    error TEXT,
    duration_ms INTEGER,
    request_id TEXT
);
CREATE INDEX audit_log_actor ON audit_log(actor_id, occurred_at);
