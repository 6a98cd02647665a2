"""The peer for the PostgreSQL figures: a procrastinate app with one task that does nothing.
Its workers run as `procrastinate --app=bench.peer_procrastinate.app worker` with
PROCRASTINATE_DSN and PROCRASTINATE_SCHEMA naming the database and schema."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector


def noop(n: int) -> None:
    """A job as small as a wakeful run that returns no effects."""


def make_app(dsn: str, schema: str) -> App:
    connector = PsycopgConnector(conninfo=dsn, kwargs={"options": f"-c search_path={schema}"})
    app = App(connector=connector)
    app.task(name="noop")(noop)
    return app


app = make_app(
    os.environ.get("PROCRASTINATE_DSN", ""), os.environ.get("PROCRASTINATE_SCHEMA", "public")
)
