"""Approval requests for the engine's own tests, which build them without an agent's run.

The store refuses an approval with no prompt (no path may ask a question nobody is shown), so
a test that asks directly gets a plain one, the engine's default shape, unless it gives its
own."""

from __future__ import annotations

import dataclasses
from typing import Any

from wakeful.core import effects
from wakeful.core.effects import Post

CHANNEL = "C0PROMPTS"


def ApprovalRequest(
    *args: Any, prompt: Post | None = None, **kwargs: Any
) -> effects.ApprovalRequest:
    """`wakeful.core.effects.ApprovalRequest` with a plain prompt when none is given."""
    request = effects.ApprovalRequest(*args, **kwargs)
    shown = prompt or Post(
        request.channel or CHANNEL,
        f"Approval needed: {request.summary or request.tool} (request {request.id})",
        priority="urgent",
    )
    return dataclasses.replace(request, prompt=shown)
