"""An emulator running in another process, read and scripted over its admin API."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from wakeful.devtools.emulator.common import (
    Call,
    JsonDict,
    _no_proxy_opener,
)


class RemoteEmulator:
    """Client for the ``/_emulator/`` admin endpoints of an emulator in another process."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout = timeout
        self._opener = _no_proxy_opener()

    def _get(self, action: str, **query: str | None) -> Any:
        q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        url = f"{self.base_url}_emulator/{action}?{q}"
        with self._opener.open(url, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _post(self, action: str, body: JsonDict) -> None:
        req = urllib.request.Request(
            f"{self.base_url}_emulator/{action}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with self._opener.open(req, timeout=self.timeout) as resp:
            resp.read()

    def messages(self, channel: str) -> list[JsonDict]:
        return list(self._get("messages", channel=channel))

    def calls(self, method: str | None = None) -> list[Call]:
        return [Call(**c) for c in self._get("calls", method=method)]

    def ephemerals(self, channel: str | None = None, user: str | None = None) -> list[JsonDict]:
        return list(self._get("ephemerals", channel=channel, user=user))

    def responses(self, key: str) -> list[Any]:
        return list(self._get("responses", key=key))

    def fault(self, method: str, **opts: Any) -> None:
        self._post("fault", {"method": method, **opts})

    def clear_faults(self) -> None:
        self._post("clear_faults", {})

    def remove_channel(self, channel: str) -> None:
        self._post("remove_channel", {"channel": channel})

    def add_channel(self, channel: str) -> None:
        self._post("add_channel", {"channel": channel})

    def clear(self) -> None:
        self._post("clear", {})

    def streams(self, channel: str | None = None) -> list[JsonDict]:
        """Every streamed message, as it is now (deleted ones marked)."""
        return list(self._get("streams", channel=channel))

    def open_streams(self) -> list[JsonDict]:
        """Streams still in progress: after a run ends, each is one left dangling."""
        return list(self._get("open_streams"))

    def press_stop(self, channel: str, ts: str) -> None:
        """The person presses Slack's stop button on a streaming reply."""
        self._post("press_stop", {"channel": channel, "ts": ts})


# -- the other direction: Slack calling the app ---------------------------------------------
