"""The baseline for the HTTP figures: a bare slack-bolt app that verifies and acknowledges
without storing, served exactly like wakeful (waitress, same settings)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult

from wakeful.bot.process.runtime import http_server


def build(secret: str) -> Any:
    def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_user_id="UBOT")

    app = App(signing_secret=secret, process_before_response=True, authorize=authorize)

    @app.event("message")
    def on_message(ack: Any) -> None:
        ack()

    return SlackRequestHandler(app)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    return serve(build(args.secret), args.port)


def serve(app: Any, port: int = 0) -> int:
    """`app` on wakeful's waitress server, as `wakeful serve` runs its front; says where."""
    server = http_server(app, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{server.effective_port}/slack/events", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
