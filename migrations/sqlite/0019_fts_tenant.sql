-- zero-memory schema v19: the full-text index knows whose a memory is.
--
-- A recall's full-text legs are driven by the match: every memory holding
-- a query word, whoever owns it, was read from `memories` and dropped by
-- the visibility filter. On a server shared by many users a small user's
-- recall of a common word read every other user's matches (a user with 50
-- memories among 200,000 of another account's: 0.34 s on the search page).
--
-- Each row of the index now carries, in a second column, a token of its
-- owner (`o` and the owner's id in hex) and, while it is shared, a token
-- of its scope (`s` and the scope in hex). A caller who reads few of the
-- file's memories adds `fts_tenant : (their owner token OR their scopes'
-- tokens)` to the match, so the index intersects first; the visibility
-- filter still decides (`scopes::Visible`). Query words are matched in the
-- `content` column only. The tokens follow the owner, scope and sharing:
-- the update trigger fires on each of them.
ALTER TABLE memories ADD COLUMN fts_tenant TEXT GENERATED ALWAYS AS (
    'o' || hex(owner_id) || CASE WHEN visibility = 'shared' THEN ' s' || hex(scope) ELSE '' END
) VIRTUAL;

DROP TRIGGER memories_fts_ai;
DROP TRIGGER memories_fts_ad;
DROP TRIGGER memories_fts_au;
DROP TABLE memories_fts;

CREATE VIRTUAL TABLE memories_fts USING fts5(
    content,
    fts_tenant,
    content = 'memories',
    content_rowid = 'seq',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, fts_tenant) VALUES (new.seq, new.content, new.fts_tenant);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, fts_tenant) VALUES ('delete', old.seq, old.content, old.fts_tenant);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, owner_id, scope, visibility ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, fts_tenant) VALUES ('delete', old.seq, old.content, old.fts_tenant);
    INSERT INTO memories_fts(rowid, content, fts_tenant) VALUES (new.seq, new.content, new.fts_tenant);
END;
INSERT INTO memories_fts(memories_fts) VALUES ('rebuild');
