"""A digest as facts, not text, so held digests merge into ONE digest covering the whole span.

An agent sends a digest as a Message of kind `digest` whose `facts` are:

    {"since": <start, epoch seconds>, "periods": <periods covered>, "missed": <of which an
     outage skipped>, "unit": "period" | "day",
     "lines": [{"key": ..., "text": "<format string>", "sum": {name: int}, "keep": {...}}]}

A line's `text` is a `str.format` template over its `sum` values (counted in the period:
summed when digests merge) and its `keep` values (a state at the time of the digest: the
latest wins). `by` (optional) is a breakdown {label: int} summed too and shown as
`label n, label n`. `render` turns facts into the post's text; `merge` folds several digests
(oldest first) into one, the way the outbox merges held rows of this kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Facts = dict[str, Any]


def utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def line(key: str, text: str, sum: Mapping[str, int] | None = None, **keep: Any) -> Facts:
    """One fact line: `text` formatted with `sum` (added up when digests merge) and `keep`."""
    return {"key": key, "text": text, "sum": dict(sum or {}), "keep": keep}


def facts(since: int, lines: Sequence[Facts], missed: int = 0, unit: str = "period") -> Facts:
    """A digest of one period, plus the `missed` periods an outage skipped."""
    lines = list(lines)
    return {"since": since, "periods": missed + 1, "missed": missed, "unit": unit, "lines": lines}


def quiet(digest: Mapping[str, Any]) -> bool:
    """Nothing new in the span: every summed count and breakdown is zero."""
    return not any(
        any(int(v) for v in ln.get("sum", {}).values()) or any(ln.get("by", {}).values())
        for ln in digest.get("lines", [])
    )


def render(digest: Mapping[str, Any]) -> str:
    """The post's text; `missed` periods (in the facts) are those an outage skipped."""
    periods, unit = int(digest.get("periods") or 1), str(digest.get("unit") or "period")
    missed = int(digest.get("missed") or 0)
    head = [f"Digest since {utc(int(digest['since']))}:"]
    if missed:
        head.append(
            f"After an outage, this digest covers {plural(periods, unit)} ({missed} missed)."
        )
    elif periods > 1:
        head.append(f"This digest covers {plural(periods, unit)}.")
    return "\n".join(head + [f"- {text}" for text in render_lines(digest.get("lines", []))])


def render_lines(lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each fact line's text, its values filled in."""
    out = []
    for ln in lines:
        values = {**ln.get("keep", {}), **ln.get("sum", {})}
        if ln.get("by"):
            values["by"] = ", ".join(f"{k} {n}" for k, n in sorted(ln["by"].items()))
        out.append(str(ln["text"]).format(**values))
    return out


def merge(digests: Sequence[Mapping[str, Any]]) -> Facts:
    """Several digests of one conversation, oldest first, as one: from the first start, the
    periods and counts added up, each line's state (and wording) from the latest digest."""
    lines: dict[str, Facts] = {}
    for digest in digests:
        for ln in digest.get("lines", []):
            key = str(ln["key"])
            old = lines.get(key)
            new = {**ln, "sum": dict(ln.get("sum", {})), "by": dict(ln.get("by", {}))}
            if old is not None:
                for name, n in old["sum"].items():
                    new["sum"][name] = int(new["sum"].get(name, 0)) + int(n)
                for name, n in old["by"].items():
                    new["by"][name] = int(new["by"].get(name, 0)) + int(n)
            lines[key] = new
    return {
        "since": min(int(d["since"]) for d in digests),
        "periods": sum(int(d.get("periods") or 1) for d in digests),
        "missed": sum(int(d.get("missed") or 0) for d in digests),
        "unit": str(digests[-1].get("unit") or "period"),
        "lines": list(lines.values()),
    }
