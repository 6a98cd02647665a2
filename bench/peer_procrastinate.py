"""The peer for the PostgreSQL figures: a procrastinate app with one task that does nothing,
on the schema PROCRASTINATE_SCHEMA of the database PROCRASTINATE_DSN. Its workers run as
`procrastinate --app=bench.peer_procrastinate.app worker`."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

app = App(
    connector=PsycopgConnector(
        conninfo=os.environ.get("PROCRASTINATE_DSN", ""),
        kwargs={"options": f"-c search_path={os.environ.get('PROCRASTINATE_SCHEMA', 'public')}"},
    )
)


@app.task(name="noop")
def noop(n: int) -> None:
    """A job as small as a wakeful run that returns no effects."""
