-- zero-memory schema v12 (PostgreSQL): one embedding per memory, for hybrid recall.
--
-- The background embedder writes a row after the memory is written (never
-- inside `remember`); until then, recall finds the memory by full text
-- only. `model` is the identity of the model that made the vector: a
-- vector is compared only with vectors of the same model, and changing the
-- model makes every memory pending again (its row is replaced). `vec` is the
-- int8 form (a little-endian f32 scale, then one signed byte per dimension);
-- NULL when the model refused the text (not retried until the model
-- changes). `vseq` grows with every row written: an instance's in-memory
-- index reads the rows past the last it saw (and re-reads a short window
-- behind it, as concurrent transactions may commit out of order). Rows go
-- with their memory.
CREATE TABLE memory_vectors (
    vseq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    memory_id TEXT NOT NULL UNIQUE REFERENCES memories(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    vec BYTEA,
    embedded_at BIGINT NOT NULL
);
