"""The baseline for the end-to-end figures: a bare slack-bolt app with no store that
acknowledges each message and then posts one reply itself (Bolt runs the listener after the
ack, in its thread pool), served like wakeful (waitress) against the same Slack emulator."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.authorization import AuthorizeResult
from slack_sdk import WebClient

from .bare_app import serve


def build(secret: str, token: str, api_url: str) -> Any:
    def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id, bot_user_id="UBOT", bot_token=token
        )

    app = App(
        signing_secret=secret,
        authorize=authorize,
        process_before_response=False,
        client=WebClient(base_url=api_url),
    )

    @app.event("message")
    def on_message(event: dict[str, Any], say: Any) -> None:
        say(text="Handled 1 message.")

    return SlackRequestHandler(app)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--api-url", required=True)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    return serve(build(args.secret, args.token, args.api_url), args.port)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
