"""The emulator as a process: `python -m wakeful.devtools.emulator --port 0`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType

from wakeful.devtools.emulator.state import SlackEmulator

# -- process mode (chaos tests) ---------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the api_url goes on the first stdout line for the parent."""
    parser = argparse.ArgumentParser(prog="python -m wakeful.devtools.emulator")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="xoxb-emulator")
    parser.add_argument("--bot-user-id", default="UBOT")
    parser.add_argument("--team-id", default="T1")
    parser.add_argument("--users", default="{}", help='JSON: {"U1": {"tz": "Europe/Paris"}}')
    parser.add_argument("--no-auto-channels", action="store_true")
    parser.add_argument("--scopes", help="granted scopes, comma-separated (default: manifest's)")
    args = parser.parse_args(argv)
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    emu = SlackEmulator(
        args.token,
        args.bot_user_id,
        args.team_id,
        json.loads(args.users),
        auto_channels=not args.no_auto_channels,
        port=args.port,
        scopes=None if args.scopes is None else [x for x in args.scopes.split(",") if x],
    )
    with emu:
        print(emu.api_url, flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
