-- zero-memory schema v8 (SQLite): teams.
--
-- A team owns the scope `team.<slug>`; its members are that scope's
-- `scope_members` rows (roles reader / writer / admin), so the one
-- visibility predicate covers team memories with no second copy of it.
-- `team_projects` lists the other scopes a team's members reach through
-- the team: the team's own projects (`team.<slug>.<project>`, owned = 1,
-- roles as in the team) and members' projects shared with it (owned = 0,
-- a team admin writes there as a writer, not as the project's admin).
--
-- Each team has a steward (`steward_id`): a users row nobody can sign in
-- as (no password, disabled), which holds what the team keeps when a
-- member leaves — their memories in the team's own scopes — and, once the
-- team is deleted, all of its memories, made private: readable by nobody.
-- The admins of that moment stay in `team_export_grants` until
-- `purge_after`, when the steward and everything it holds are erased.
CREATE TABLE teams (
    id TEXT PRIMARY KEY,
    slug TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    scope TEXT NOT NULL UNIQUE,
    created_by TEXT,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER,
    deleted_by TEXT,
    purge_after INTEGER,
    steward_id TEXT REFERENCES users(id) ON DELETE SET NULL
);

CREATE TABLE team_projects (
    team_scope TEXT NOT NULL REFERENCES teams(scope) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    owned INTEGER NOT NULL,
    added_by TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (team_scope, scope)
);
CREATE INDEX team_projects_scope ON team_projects(scope);

CREATE TABLE team_invitations (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    invited_by TEXT,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    accepted_at INTEGER,
    accepted_by TEXT,
    revoked_at INTEGER
);
CREATE INDEX team_invitations_email ON team_invitations(email);

CREATE TABLE team_events (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    occurred_at INTEGER NOT NULL,
    actor_id TEXT,
    action TEXT NOT NULL,
    subject_user_id TEXT,
    subject TEXT,
    role TEXT,
    request_id TEXT
);
CREATE INDEX team_events_team ON team_events(team_id, occurred_at);

CREATE TABLE team_export_grants (
    team_id TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    PRIMARY KEY (team_id, user_id)
);

-- A member without a binding of their own for a repository resolves its
-- hint to a project a teammate shared with their team: bindings by key.
CREATE INDEX project_bindings_key ON project_bindings(kind, key);
