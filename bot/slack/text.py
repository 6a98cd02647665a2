"""Text from outside (a person, another system, the model), made safe to show in Slack.

Slack acts on `<...>` in a message: `<!channel>`, `<!here>`, `<!everyone>` and
`<!subteam^ID>` page people, `<@U...>` and `<#C...>` mention, and `<https://evil|label>` shows
a link under a label of the sender's choosing. Every text an agent echoes goes through `inert`
on its way into a reply, a prompt or the Home tab: Slack's own escaping (`&amp;`, `&lt;`,
`&gt;`, https://api.slack.com/reference/surfaces/formatting#escaping) makes each of them
show as typed, never acted on. The sender never adds `link_names` or a `parse` mode, which
could turn plain words back into pings (bot/slack/sender.py).

Bidirectional controls (U+202A–U+202E embeddings and overrides, U+2066–U+2069 isolates) act
too: they reorder what follows, so an order id with U+202E (right-to-left override) inside
reads as another order, or a link's text as another address. `inert` shows each as its code
point (`[U+202E]`) instead.
"""

from __future__ import annotations

import re

_BARE_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt);)")
"""An `&` that does not already start one of Slack's three entities."""
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
"""The embedding, override and isolate controls of the Unicode bidirectional algorithm."""


def inert(text: str) -> str:
    """`text` as Slack will show it, never act on it: every `<` and `>` escaped, every `&`
    that is not already one of Slack's entities, and every bidirectional control written as
    its code point (`[U+202E]`). Text from Slack arrives escaped already, so it is shown as
    the person typed it, and inert(inert(t)) == inert(t)."""
    text = BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)
    return _BARE_AMPERSAND.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")


def addressed(text: str, me: str | None) -> str:
    """What a person wrote to the agent whose user id is `me`: `text` without the leading
    mention of the agent (`<@ME>` or `<@ME|name>`, and the spaces after it) that every
    @mention starts with, the rest as typed. Unchanged when it does not start so."""
    if not me:
        return text
    found = re.match(rf"\s*<@{re.escape(me)}(?:\|[^>]*)?>\s*", text)
    return text[found.end() :] if found else text
