-- zero-memory schema v29 (SQLite): where an OAuth client registered from.
--
-- Registration is anonymous. The registrations waiting for their first
-- sign-in were bounded only in all (10,000), so a few dozen addresses
-- registering without pause kept that bound full and every new client
-- out. Each registration now records its network (an IPv4 address, an
-- IPv6 /48), and a network has its own bound of waiting registrations.
-- Clients registered before this version have none and count only in all.
ALTER TABLE oauth_clients ADD COLUMN registered_from TEXT;
CREATE INDEX oauth_clients_waiting_from ON oauth_clients(registered_from, created_at)
    WHERE owner_id IS NULL;
