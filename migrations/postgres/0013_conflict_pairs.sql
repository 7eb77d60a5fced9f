-- zero-memory schema v13 (PostgreSQL): conflicts found by the memories they hold.
--
-- Recall reads the pending conflicts around its hits by memory id, the
-- near-duplicate sweep asks whether a pair already has a conflict, and
-- deleting a memory cascades to its conflicts: each looks conflicts up by
-- `memory_a` or `memory_b`, which until now meant reading every conflict
-- of the owner.
CREATE INDEX conflicts_pair ON conflicts(memory_a, memory_b);
CREATE INDEX conflicts_memory_b ON conflicts(memory_b);
