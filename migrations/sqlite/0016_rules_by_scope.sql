-- zero-memory schema v16: promoted rules found by the scope they apply to.
--
-- A briefing reads the caller's own promoted rules and those applying to
-- the project and team scopes the caller belongs to (`owner_id = … OR
-- applies_scope IN (…)`). The owner side had an index; the scope side had
-- none, so every briefing read every user's rules.
CREATE INDEX rules_applies_scope ON rules(applies_scope) WHERE status = 'promoted';
