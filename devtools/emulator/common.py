"""What every part of the emulator shares: recorded calls, scripted faults, Slack errors,
ts and paging helpers."""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger("wakeful.devtools.emulator")

JsonDict = dict[str, Any]
RESPONSE_URL_METHOD = "response_url"
"""Pseudo method name under which response-URL posts are recorded and can be faulted."""


@dataclass(frozen=True)
class Call:
    """One request the emulator answered, kept so tests can assert on what the app sent."""

    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    at: float
    response: dict[str, Any]
    status: int
    team: str | None = None
    """The workspace whose token the call carried (None: no valid token)."""


@dataclass(frozen=True)
class _Fault:
    status: int | None
    error: str | None
    retry_after: int | None
    delay: float | None

    @property
    def fails(self) -> bool:
        """A delay-only fault is a slow success; anything else replaces the answer."""
        return self.status is not None or self.error is not None

    def answer(self) -> tuple[int, JsonDict, dict[str, str]]:
        status = self.status if self.status is not None else 200
        default = "ratelimited" if status == 429 else "internal_error"
        headers = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
        return status, {"ok": False, "error": self.error or default}, headers


class _SlackError(Exception):
    """Raised inside a method handler to answer ``{"ok": false, "error": code}``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _ts_us(ts: str) -> int:
    """Order Slack ``ts`` strings exactly; floats lose the last microsecond digits."""
    sec, _, frac = ts.partition(".")
    return int(sec) * 1_000_000 + int((frac + "000000")[:6])


def _format_ts(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _json_field(params: Mapping[str, Any], name: str) -> Any:
    """Form bodies carry blocks/metadata as JSON strings, JSON bodies as objects."""
    value = params.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value) if value else None
        except ValueError:
            raise _SlackError(f"invalid_{name}") from None
    return value


def _tz_offset(tz: str) -> int:
    try:
        offset = datetime.now(ZoneInfo(tz)).utcoffset()
    except (ZoneInfoNotFoundError, ValueError):
        return 0
    return int(offset.total_seconds()) if offset is not None else 0


def _cursor(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _paginate(items: list[JsonDict], params: Mapping[str, Any], newest_first: bool) -> JsonDict:
    """Slack-style cursor paging: the cursor names the first ts of the next page."""
    cursor = params.get("cursor")
    if cursor:
        try:
            start = _ts_us(base64.b64decode(str(cursor)).decode().removeprefix("next_ts:"))
        except ValueError:
            raise _SlackError("invalid_cursor") from None
        if newest_first:
            items = [m for m in items if _ts_us(m["ts"]) <= start]
        else:
            items = [m for m in items if _ts_us(m["ts"]) >= start]
    try:
        limit = int(params.get("limit") or 100)
    except (TypeError, ValueError):
        raise _SlackError("invalid_limit") from None
    limit = min(max(limit, 1), 999)
    page, more = items[:limit], len(items) > limit
    out: JsonDict = {"messages": page, "has_more": more}
    if more:
        out["response_metadata"] = {"next_cursor": _cursor(items[limit]["ts"])}
    return out


def _window(items: list[JsonDict], params: Mapping[str, Any]) -> list[JsonDict]:
    """Apply ``oldest``/``latest`` (exclusive unless ``inclusive``), as Slack does."""
    inclusive = _truthy(params.get("inclusive"))
    lo = _ts_us(str(params["oldest"])) if params.get("oldest") else None
    hi = _ts_us(str(params["latest"])) if params.get("latest") else None

    def keep(m: JsonDict) -> bool:
        ts = _ts_us(m["ts"])
        if lo is not None and (ts < lo or (ts == lo and not inclusive)):
            return False
        return not (hi is not None and (ts > hi or (ts == hi and not inclusive)))

    return [m for m in items if keep(m)]


def _manifest_scopes() -> list[str]:
    from wakeful.bot.slack.scopes import required_scopes

    return required_scopes() or []


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    """Loopback traffic must never be routed through an ``http_proxy`` from the env."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))
