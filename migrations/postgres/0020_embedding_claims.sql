-- zero-memory schema v20 (PostgreSQL): who is embedding which memory.
--
-- Every instance on one database runs its own background embedder, and
-- each walked the same pending memories: after a model change, or a large
-- import, N instances embedded the whole backlog N times over (the
-- vectors written after the first were dropped by `ON CONFLICT`). An
-- embedder now claims a batch before it embeds it: one row per memory,
-- under its model, until `until_at` (store clock, ms). A claim is taken
-- only where none of that model is live, so two embedders never take one
-- memory; the vectors' transaction deletes it; a claim whose embedder died
-- lapses at `until_at`, and the memory is pending for anyone again.
-- Transient: a copy between backends leaves these rows behind.
CREATE TABLE embedding_claims (
    memory_id TEXT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    until_at BIGINT NOT NULL
);
