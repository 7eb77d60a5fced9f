-- zero-memory schema v14 (PostgreSQL): imports found by the memory they brought.
--
-- The near-duplicate sweep by meaning leaves out memories an import
-- brought (old memories, not what agents write now): it asks, for each
-- freshly embedded memory, whether an import row names it.
CREATE INDEX imports_memory ON imports(memory_id);
