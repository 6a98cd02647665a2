"""An operations agent: `restart <service>` asks an approver first, then calls the ops service
exactly once; `report daily at HH:MM` posts each day what was restarted.

The restart is an approval-gated tool: wakeful runs it after a yes, as a durable step keyed by
the approval's request id, which the tool sends as its Idempotency-Key. A worker that dies
mid-call makes the next one call again with the same key; the ops service answers the first
restart again, and the agent reports the same restart both times.

Run it: OPS_URL=http://127.0.0.1:8081 WAKEFUL_AGENT=examples.ops:factory wakeful serve
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from typing import Any

from wakeful.agents import (
    Agent,
    ApprovalAnswer,
    Message,
    Run,
    Setup,
    Timer,
    TimerTick,
    Tool,
    inert,
)

RESTART = re.compile(r"^restart ([a-z][a-z0-9-]{0,40})$")
REPORT = re.compile(r"^report daily at ([01]\d|2[0-3]):([0-5]\d)$")


def restart(args: Any, key: str) -> Any:
    """POST /restart/<service> with the key; the service does each key's restart once."""
    url = f"{os.environ.get('OPS_URL', 'http://127.0.0.1:8081')}/restart/{args['service']}"
    request = urllib.request.Request(url, method="POST", headers={"Idempotency-Key": key})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)  # {"service": ..., "restart_id": ...}


class Ops(Agent):
    tools = (Tool("restart", restart, "Restart a service"),)
    suggested_prompts = (("Restart", "restart web"), ("Daily report", "report daily at 09:00"))

    def __init__(self, setup: Setup) -> None:
        self.zone = setup.time_zone

    def run(self, run: Run) -> None:
        state = run.session or {"restarted": []}
        for e in run.events:
            if isinstance(e, Message) and (m := RESTART.match(e.text.strip())):
                service = m.group(1)
                run.ask("restart", {"service": service}, summary=f"restart {service}", to=e)
            elif isinstance(e, Message) and (m := REPORT.match(e.text.strip())):
                zone = self.zone(e.user)
                at = f"{m.group(1)}:{m.group(2)}"
                run.set_timer(Timer.daily("report", at, zone.name), to=e)
                run.reply(f"Report set: daily at {at} ({zone.name}).", to=e)
            elif isinstance(e, Message):
                run.reply(f"I know `restart <service>`; you said {inert(e.text)}", to=e)
            elif isinstance(e, ApprovalAnswer) and e.answer == "yes" and e.result:
                done = f"{e.args['service']} ({e.result['restart_id']})"
                state["restarted"].append(done)
                run.reply(f"Restarted {done}.", to=e)
            elif isinstance(e, ApprovalAnswer):
                run.reply(f"Not restarted: {e.answer} ({e.error or 'nothing ran'}).", to=e)
            elif isinstance(e, TimerTick):
                done = ", ".join(state["restarted"]) or "nothing"
                run.reply(f"Restarted since the last report: {done}.", to=e)
                state["restarted"] = []
        run.save(state)


def factory(setup: Setup) -> Ops:
    return Ops(setup)
