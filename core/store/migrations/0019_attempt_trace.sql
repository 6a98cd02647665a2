-- Tracing (issue 39): the trace of the run behind a row another run's span links to. An
-- attempt's is the failed run's (its retry links to it); a timer's the run that set it (each
-- tick starts a trace of its own, linked to it); an approval's the run that asked (the click
-- that answers links to it). Each a W3C `traceparent`, NULL when the writer was not tracing:
-- only ids, never a secret, never text.
ALTER TABLE attempts ADD COLUMN trace TEXT;
ALTER TABLE timers ADD COLUMN trace TEXT;
ALTER TABLE approvals ADD COLUMN trace TEXT;
