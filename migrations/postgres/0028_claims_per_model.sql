-- zero-memory schema v28 (PostgreSQL): an embedding claim per memory and
-- model.
--
-- Claims were one row per memory: an embedder of another model (two
-- instances on different models, or a model change under way) took over
-- a live claim, and the embedder of the first model then took it back,
-- so two embedders of one model could embed the same memory. Each model
-- now claims apart. Claims are transient (they lapse within minutes), so
-- the table is made anew.
DROP TABLE embedding_claims;
CREATE TABLE embedding_claims (
    memory_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    until_at BIGINT NOT NULL,
    PRIMARY KEY (memory_id, model)
);
