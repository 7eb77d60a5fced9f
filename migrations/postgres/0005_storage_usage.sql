-- zero-memory schema v5 (PostgreSQL): what each user stores, for the
-- per-user storage quotas and /metrics. Maintained by a trigger on
-- `memories` only — no code writes it — so every path that adds or removes
-- a memory keeps it true. `bytes` counts the stored text: content plus
-- provenance (which carries `verbatim`), in UTF-8 bytes.
CREATE TABLE storage_usage (
    user_id TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    memories BIGINT NOT NULL,
    bytes BIGINT NOT NULL
);

INSERT INTO storage_usage (user_id, memories, bytes)
SELECT owner_id, COUNT(*),
       SUM(octet_length(content) + COALESCE(octet_length(source), 0))
FROM memories GROUP BY owner_id;

CREATE FUNCTION zm_storage_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE storage_usage SET
            memories = memories - 1,
            bytes = bytes - (octet_length(OLD.content) + COALESCE(octet_length(OLD.source), 0))
        WHERE user_id = OLD.owner_id;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO storage_usage (user_id, memories, bytes)
        VALUES (NEW.owner_id, 1, octet_length(NEW.content) + COALESCE(octet_length(NEW.source), 0))
        ON CONFLICT (user_id) DO UPDATE SET
            memories = storage_usage.memories + 1,
            bytes = storage_usage.bytes + EXCLUDED.bytes;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER memories_usage
AFTER INSERT OR DELETE OR UPDATE OF owner_id, content, source ON memories
FOR EACH ROW EXECUTE FUNCTION zm_storage_usage();
