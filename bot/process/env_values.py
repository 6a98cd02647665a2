"""Reading one setting from the environment: on/off switches, numbers and durations within
bounds, the log format and level, and the one error every malformed setting raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wakeful.core.errors import InvalidInput
from wakeful.core.settings import parse_duration

LOG_FORMATS = ("text", "json")


class ConfigError(InvalidInput):
    """A setting is missing or malformed; the message names it."""


_SWITCH = {"1": True, "true": True, "on": True, "yes": True}
_SWITCH |= {"0": False, "false": False, "off": False, "no": False}


def switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off setting: 1/true/on/yes or 0/false/off/no (any case); unset means `default`."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _SWITCH:
        raise ConfigError(f"{name} must be on or off (1/true/on or 0/false/off), got {raw!r}")
    return _SWITCH[raw]


def log_format(env: Mapping[str, str]) -> str:
    """WAKEFUL_LOG_FORMAT: `text` (the default, for people) or `json` (one object a line)."""
    raw = env.get("WAKEFUL_LOG_FORMAT", "").strip().lower() or "text"
    if raw not in LOG_FORMATS:
        shown = env.get("WAKEFUL_LOG_FORMAT", "")
        raise ConfigError(f"WAKEFUL_LOG_FORMAT must be text or json, got {shown!r}")
    return raw


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(value: str, where: str = "WAKEFUL_LOG_LEVEL") -> str:
    """A log level by name (any case): a typo must not quietly log at another level."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{where} must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return level


def int_value(
    env: Mapping[str, str], name: str, default: int, low: int, high: int | None = None
) -> int:
    return int(number(env, name, default, int, "a whole number", low, high))


def duration(
    env: Mapping[str, str],
    name: str,
    default: float,
    low: float,
    high: float | None = None,
    whole: bool = True,
) -> float:
    """A duration setting (core.settings.parse_duration: `90`, `90s`, `15m`, `1h`, `30d`)
    within [low, high] seconds; its default when unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse_duration(name, raw, whole)
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from None
    if value < low or (high is not None and value > high):
        bounds = (
            f"between {_secs(low)} and {_secs(high)} s"
            if high is not None
            else (f"at least {_secs(low)} s")
        )
        raise ConfigError(f"{name} must be {bounds}, got {raw!r}")
    return value


def whole_duration(
    env: Mapping[str, str], name: str, default: int, low: int, high: int | None = None
) -> int:
    return int(duration(env, name, default, low, high))


def _secs(value: float) -> str:
    return f"{value:g}"


def number(
    env: Mapping[str, str],
    name: str,
    default: float,
    parse: Callable[[str], float],
    what: str,
    low: float,
    high: float | None,
    unit: str = "",
) -> float:
    """The setting `name` read with `parse`, within [low, high]; its default when unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {what}, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{name} must be {bounds}{unit}, got {raw}")
    return value
