"""Hypothesis strategies for hostile bodies and headers: odd strings, JSON values with Slack's
keys, header texts and content types; the settings every fuzz test runs with."""

from __future__ import annotations

from hypothesis import HealthCheck
from hypothesis import strategies as st

from tests.support.hostile import DM_CHANNEL, DM_USER, FORM_CT, INTRUDER, JSON_CT, TEAM
from wakeful.bot.slack import blocks

FUZZ_SETTINGS = {
    "deadline": None,
    "database": None,
    "print_blob": False,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
}


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()

ODD_STRINGS = [
    "",
    " ",
    "\x00",
    "\ud800",
    "\udfff",
    "null",
    "0",
    "-1",
    "NaN",
    "Robert'); DROP TABLE events;--",
    "' OR 1=1 --",
    "👍🏽",
    "\u202eevil",
    "x" * 600,
    DM_USER,
    DM_CHANNEL,
    TEAM,
    INTRUDER,
    "message",
    "app_mention",
    "im",
    "channel",
    "bot_message",
    "file_share",
    blocks.APPROVE,
    blocks.DENY,
    "event_callback",
    "block_actions",
    "1700000000.000100",
]
SLACK_KEYS = [
    "type",
    "event",
    "event_id",
    "team_id",
    "team",
    "user",
    "id",
    "channel",
    "container",
    "actions",
    "action_id",
    "value",
    "text",
    "ts",
    "thread_ts",
    "subtype",
    "bot_id",
    "channel_type",
    "authorizations",
    "enterprise",
    "enterprise_id",
    "is_enterprise_install",
    "api_app_id",
    "token",
    "challenge",
    "view",
    "message",
    "response_url",
    "trigger_id",
    "state",
    "user_id",
    "channel_id",
    "callback_id",
    "message_ts",
]

odd_text = st.text(max_size=12) | st.sampled_from(ODD_STRINGS)
json_key = st.text(max_size=8) | st.sampled_from(SLACK_KEYS)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | odd_text
)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(json_key, kids, max_size=3),
    max_leaves=10,
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=80,
)
"""What http.client will send and waitress will parse as a header value (VCHAR, SP, obs-text)."""
CONTENT_TYPES = [
    JSON_CT,
    "application/json; charset=utf-8",
    FORM_CT,
    f"{FORM_CT}; charset=utf-8",
    "text/plain",
    "multipart/form-data; boundary=hx",
    None,
    "garbage",
    "*/*",
    f"{JSON_CT}, {FORM_CT}",
]
content_type = st.sampled_from(CONTENT_TYPES) | header_text
