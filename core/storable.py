"""Text both stores can hold, the same way.

PostgreSQL refuses U+0000 in any text value ("text fields cannot contain NUL"), and neither
driver can encode a lone surrogate (U+D800 to U+DFFF on its own) as UTF-8. Outside text can
carry either: a Slack message, a slash command, a GitHub issue title, the model's answer. One
such character must not fail a write that carries other people's work, nor be stored on one
store and refused by the other. So:

- text that is content (event payloads at ingest; what a run writes: message text, blocks,
  facts, timer payloads, approval args, the session, tool args, error texts) has each such
  character replaced by U+FFFD, the replacement character, before anything is stored: the
  agent never sees a NUL, and every reply can be stored;
- text that names a row (inbox, source and delivery ids, channels, users, timer and approval
  ids) is refused with InvalidInput (`check_name`): a name changed on the way in would name
  another row.
"""

from __future__ import annotations

import re
from typing import Any

from wakeful.core.errors import InvalidInput

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_storable(text: str) -> bool:
    """Whether both stores hold `text` as it is. Cheap on the ingest path: `isascii` is a
    flag lookup, so only non-ASCII text is scanned for surrogates."""
    return "\x00" not in text and (text.isascii() or _SURROGATE.search(text) is None)


def storable(text: str) -> str:
    """`text` with every NUL and lone surrogate replaced by U+FFFD (unchanged, and not
    copied, when it has none)."""
    if is_storable(text):
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable_value(value: Any) -> Any:
    """A JSON-shaped value with `storable` applied to every string in it, keys included."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable_value(k): storable_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_value(v) for v in value]
    return value


def needs_cleaning(encoded: str) -> bool:
    """Whether JSON text (from an encoder with ensure_ascii=False) may hold a NUL or a lone
    surrogate: the encoder writes a NUL as the escape `\\u0000` and a surrogate as it is. A
    false alarm (a literal backslash before `u0000`) only costs a second encoding."""
    return "\\u0000" in encoded or not (encoded.isascii() or _SURROGATE.search(encoded) is None)


def check_name(what: str, value: object) -> None:
    """Refuse a name a store cannot hold the same way on both backends (a value that is not a
    string is left to the caller's own checks)."""
    if isinstance(value, str) and not is_storable(value):
        raise InvalidInput(f"{what} contains a NUL or a lone surrogate, which cannot be stored")
