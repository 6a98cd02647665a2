-- A thread the bot last took part in longer ago than the retention is forgotten (a reply there
-- needs a new @mention): the row keeps when the bot last posted or was mentioned there, and an
-- index on that age lets the pruner read the oldest first without walking the table.
ALTER TABLE threads ADD COLUMN last_at BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET last_at = created_at;
CREATE INDEX threads_age ON threads (last_at);
