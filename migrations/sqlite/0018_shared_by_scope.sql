-- zero-memory schema v18: nothing on SQLite.
--
-- PostgreSQL gains an index of shared memories by scope, for the reads
-- whose visibility rule lists the caller's member scopes. SQLite keeps the
-- rule as a subquery and gets no such index: with it, its planner drove
-- recall's lookups of a hundred ids through the owner's index instead of
-- the ids (hybrid recall at 100,000 memories went from 8 ms to 102 ms).
SELECT 1;
