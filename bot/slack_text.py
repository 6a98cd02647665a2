"""Text from outside (a person, another system, the model), made safe to show in Slack.

Slack acts on `<...>` in a message: `<!channel>`, `<!here>`, `<!everyone>` and
`<!subteam^ID>` page people, `<@U...>` and `<#C...>` mention, and `<https://evil|label>` shows
a link under a label of the sender's choosing. Every text an agent echoes goes through `inert`
on its way into a reply, a prompt or the Home tab: Slack's own escaping (`&amp;`, `&lt;`,
`&gt;`, https://api.slack.com/reference/surfaces/formatting#escaping) makes each of them
show as typed, never acted on. The sender never adds `link_names` or a `parse` mode, which
could turn plain words back into pings (bot/sender.py).
"""

from __future__ import annotations

import re

_BARE_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt);)")
"""An `&` that does not already start one of Slack's three entities."""


def inert(text: str) -> str:
    """`text` as Slack will show it, never act on it: every `<` and `>` escaped, and every `&`
    that is not already one of Slack's entities. Text from Slack arrives escaped already, so
    it is shown as the person typed it, and inert(inert(t)) == inert(t)."""
    return _BARE_AMPERSAND.sub("&amp;", text).replace("<", "&lt;").replace(">", "&gt;")
