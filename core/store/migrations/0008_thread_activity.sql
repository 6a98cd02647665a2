-- A thread the bot last took part in longer ago than the retention is forgotten (a reply there
-- needs a new @mention): the row keeps when the bot last posted or was mentioned there, and an
-- index on that age lets the pruner read the oldest first without walking the table.
ALTER TABLE threads ADD COLUMN last_at BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET last_at = created_at;
-- A thread the bot has posted in since it was remembered counts from its latest post, so an
-- upgrade does not forget a thread still in use (one pass over the sent rows, grouped).
UPDATE threads SET last_at = s.latest
FROM (SELECT channel, thread_ts, MAX(sent_at) AS latest FROM outbox
      WHERE status = 'sent' AND thread_ts <> '' GROUP BY channel, thread_ts) AS s
WHERE threads.channel = s.channel AND threads.thread_ts = s.thread_ts
  AND s.latest > threads.last_at;
CREATE INDEX threads_age ON threads (last_at);
