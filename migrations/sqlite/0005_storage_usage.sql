-- zero-memory schema v5 (SQLite): what each user stores, for the per-user
-- storage quotas and /metrics. Maintained by triggers on `memories` only —
-- no code writes it — so every path that adds or removes a memory keeps it
-- true. `bytes` counts the stored text: content plus provenance (which
-- carries `verbatim`), in UTF-8 bytes.
CREATE TABLE storage_usage (
    user_id TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    memories INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);

INSERT INTO storage_usage (user_id, memories, bytes)
SELECT owner_id, COUNT(*),
       SUM(length(CAST(content AS BLOB)) + COALESCE(length(CAST(source AS BLOB)), 0))
FROM memories GROUP BY owner_id;

CREATE TRIGGER memories_usage_ai AFTER INSERT ON memories BEGIN
    INSERT INTO storage_usage (user_id, memories, bytes)
    VALUES (new.owner_id, 1,
            length(CAST(new.content AS BLOB)) + COALESCE(length(CAST(new.source AS BLOB)), 0))
    ON CONFLICT (user_id) DO UPDATE SET
        memories = memories + 1,
        bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER memories_usage_ad AFTER DELETE ON memories BEGIN
    UPDATE storage_usage SET
        memories = memories - 1,
        bytes = bytes - (length(CAST(old.content AS BLOB)) + COALESCE(length(CAST(old.source AS BLOB)), 0))
    WHERE user_id = old.owner_id;
END;

CREATE TRIGGER memories_usage_au AFTER UPDATE OF owner_id, content, source ON memories BEGIN
    UPDATE storage_usage SET
        memories = memories - 1,
        bytes = bytes - (length(CAST(old.content AS BLOB)) + COALESCE(length(CAST(old.source AS BLOB)), 0))
    WHERE user_id = old.owner_id;
    INSERT INTO storage_usage (user_id, memories, bytes)
    VALUES (new.owner_id, 1,
            length(CAST(new.content AS BLOB)) + COALESCE(length(CAST(new.source AS BLOB)), 0))
    ON CONFLICT (user_id) DO UPDATE SET
        memories = memories + 1,
        bytes = bytes + excluded.bytes;
END;
