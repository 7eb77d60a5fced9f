-- zero-memory schema v4 (SQLite): disabling an account. While disabled_at is
-- set, every credential of the user is refused (personal tokens, OAuth
-- tokens, the password); clearing it re-enables the account.
ALTER TABLE users ADD COLUMN disabled_at INTEGER;
