-- Tracing (issue 39): the trace an event or an outbox row was written in, so the work it causes
-- in another process (the worker's run, the dispatcher's post) joins that trace. Each is a W3C
-- `traceparent` (00-<trace id>-<span id>-<flags>), NULL when the writer was not tracing: an
-- event's is the span that stored it (the front's request), an outbox row's the run that
-- queued it. Only ids: never a secret, never text.
ALTER TABLE events ADD COLUMN trace TEXT;
ALTER TABLE outbox ADD COLUMN trace TEXT;
