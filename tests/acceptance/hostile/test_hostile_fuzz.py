"""Hostile input, fuzzed with hypothesis: forged and garbage requests, unhandled types,
mutated envelopes and clicks (tests/acceptance/hostile/conftest.py has the rules).

The fuzz tests count the requests they send; the total is printed at the end (run with -s).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_values import (
    DELETE,
    FUZZ_SETTINGS,
    content_type,
    header_text,
    json_key,
    json_value,
    odd_text,
)
from tests.support.hostile import (
    FORM_CT,
    INTRUDER,
    JSON_CT,
    OWNER,
    SECRET,
    STANDING,
    Live,
    as_form,
    as_json,
    assert_nothing_stored,
    assert_only_ephemerals_for,
    assert_well_typed,
    click,
    envelope,
    mention_event,
    message_event,
    new_events,
    send,
    sign,
    signed,
    snapshot,
)
from wakeful.bot.slack import blocks

FUZZ: Counter[str] = Counter()
"""Requests sent by each fuzz test (shrinking included); printed at module teardown."""


@pytest.fixture(scope="module", autouse=True)
def fuzz_report() -> Iterator[None]:
    yield
    total = sum(FUZZ.values())
    detail = ", ".join(f"{name}={n}" for name, n in sorted(FUZZ.items()))
    print(f"\nhostile-input fuzz cases run: {total} ({detail})")


MESSAGE_PATHS: list[tuple[str | int, ...]] = [
    ("type",),
    ("event_id",),
    ("team_id",),
    ("api_app_id",),
    ("authorizations",),
    ("authorizations", 0),
    ("authorizations", 0, "team_id"),
    ("authorizations", 0, "user_id"),
    ("authorizations", 0, "is_enterprise_install"),
    ("enterprise_id",),
    ("is_enterprise_install",),
    ("event",),
    ("event", "type"),
    ("event", "user"),
    ("event", "text"),
    ("event", "channel"),
    ("event", "channel_type"),
    ("event", "ts"),
    ("event", "thread_ts"),
    ("event", "subtype"),
    ("event", "bot_id"),
    ("event", "team"),
    ("event", "blocks"),
    ("event", "files"),
]
CLICK_PATHS: list[tuple[str | int, ...]] = [
    ("type",),
    ("user",),
    ("user", "id"),
    ("user", "team_id"),
    ("team",),
    ("team", "id"),
    ("enterprise",),
    ("is_enterprise_install",),
    ("channel",),
    ("channel", "id"),
    ("container",),
    ("container", "channel_id"),
    ("message",),
    ("actions",),
    ("actions", 0),
    ("actions", 0, "action_id"),
    ("actions", 0, "value"),
    ("actions", 0, "block_id"),
    ("api_app_id",),
    ("state",),
    ("response_url",),
]


def mutations(paths: list[tuple[str | int, ...]]) -> st.SearchStrategy[list[Any]]:
    change = st.tuples(st.sampled_from(paths), st.just(DELETE) | json_value)
    return st.lists(change, min_size=1, max_size=3)


def mutated(doc: dict[str, Any], changes: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for path, value in changes:
        parent: Any = out
        for key in path[:-1]:
            parent = _child(parent, key)
        key = path[-1]
        if isinstance(key, int):
            if isinstance(parent, list) and len(parent) > key:
                if value is DELETE:
                    del parent[key]
                else:
                    parent[key] = copy.deepcopy(value)
        elif isinstance(parent, dict):
            if value is DELETE:
                parent.pop(key, None)
            else:
                parent[key] = copy.deepcopy(value)
    return out


def _child(node: Any, key: str | int) -> Any:
    if isinstance(key, int):
        return node[key] if isinstance(node, list) and len(node) > key else None
    return node.get(key) if isinstance(node, dict) else None


def _clicker(doc: dict[str, Any]) -> Any:
    user = doc.get("user")
    return user.get("id") if isinstance(user, dict) else None


def _slack_object(body: bytes) -> bool:
    """True when `body` would pass the front's first check as JSON (to keep garbage garbage)."""
    try:
        value = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and isinstance(value.get("type"), str)


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# Forgeries: each recipe is applied at send time, against the clock of that moment.
forgery = st.one_of(
    st.tuples(st.just("no-signature"), st.none()),
    st.tuples(st.just("no-timestamp"), st.none()),
    st.tuples(st.just("no-headers"), st.none()),
    st.tuples(
        st.just("stale"),
        st.integers(301, 10**12) | st.integers(-(10**12), -301),
    ),
    st.tuples(
        st.just("bad-timestamp"),
        header_text.filter(lambda s: not s.strip(" \t").isdigit())
        | st.sampled_from(["-1", "+1700000000", "1e9", "1.7e9", "0x65", "1_700_000_000", "²³"]),
    ),
    st.tuples(st.just("huge-timestamp"), st.integers(10, 5000).map(lambda n: "9" * n)),
    st.tuples(
        st.just("wrong-secret"),
        st.text(min_size=1, max_size=40).filter(lambda s: s != SECRET)
        | st.sampled_from([SECRET + " ", SECRET.upper(), SECRET[:-1], " " + SECRET]),
    ),
    st.tuples(st.just("other-bytes"), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("shifted-timestamp"), st.integers(-300, 300).filter(bool)),
    st.tuples(st.just("truncated"), st.integers(0, 66)),
    st.tuples(
        st.just("prefix"),
        st.sampled_from(["v1=", "V0=", "v0:", "", "v0=v0=", "sha256=", "v00=", "v0 ="]),
    ),
    st.tuples(st.just("upper-hex"), st.none()),
    st.tuples(st.just("garbage-signature"), header_text),
    st.tuples(st.just("duplicate-signature"), st.none() | header_text),
    st.tuples(st.just("duplicate-timestamp"), st.none() | header_text),
    st.tuples(st.just("underscore-header"), st.none()),
)


def forged_headers(recipe: tuple[str, Any], body: bytes) -> list[tuple[str, str]]:
    kind, arg = recipe
    now = int(time.time())
    good = sign(body, now)
    ts, sig = ("X-Slack-Request-Timestamp", "X-Slack-Signature")
    if kind == "no-signature":
        return [(ts, str(now))]
    if kind == "no-timestamp":
        return [(sig, good)]
    if kind == "no-headers":
        return []
    if kind == "stale":
        return [(ts, str(now + arg)), (sig, sign(body, now + arg))]
    if kind in ("bad-timestamp", "huge-timestamp"):
        return [(ts, arg), (sig, sign(body, arg))]
    if kind == "wrong-secret":
        return [(ts, str(now)), (sig, sign(body, now, arg))]
    if kind == "other-bytes":
        return [(ts, str(now)), (sig, sign(body + arg, now))]
    if kind == "shifted-timestamp":
        return [(ts, str(now + arg)), (sig, good)]
    if kind == "truncated":
        return [(ts, str(now)), (sig, good[:arg])]
    if kind == "prefix":
        return [(ts, str(now)), (sig, arg + good[3:])]
    if kind == "upper-hex":
        return [(ts, str(now)), (sig, "v0=" + good[3:].upper())]
    if kind == "garbage-signature":
        return [(ts, str(now)), (sig, arg)]
    if kind == "duplicate-signature":
        return [(ts, str(now)), (sig, good), (sig, good if arg is None else arg)]
    if kind == "duplicate-timestamp":
        return [(ts, str(now)), (ts, str(now) if arg is None else arg), (sig, good)]
    if kind == "underscore-header":
        return [(ts, str(now)), ("X_Slack_Signature", good)]
    raise AssertionError(kind)


forged_body = st.one_of(
    st.sampled_from(["valid-event", "valid-mention", "owner-approves-standing"]),
    st.binary(max_size=300),
    json_value.map(lambda v: json.dumps(v).encode("utf-8")),
)


def materialise(body: str | bytes) -> tuple[bytes, str | None]:
    """A body recipe -> bytes and the content type it should carry when it is real."""
    if body == "valid-event":
        return as_json(envelope(message_event("forged"))), JSON_CT
    if body == "valid-mention":
        return as_json(envelope(mention_event("<@UBOT> forged"))), JSON_CT
    if body == "owner-approves-standing":
        return as_form(click(OWNER, STANDING)), FORM_CT
    assert isinstance(body, bytes)
    return body, None


@settings(max_examples=400, **FUZZ_SETTINGS)
@given(
    body=forged_body,
    recipe=forgery,
    ctype=st.none() | content_type,
)
def test_fuzz_forged_requests_are_401_and_store_nothing(
    live: Live, body: str | bytes, recipe: tuple[str, Any], ctype: str | None
) -> None:
    FUZZ["forged"] += 1
    data, natural_ct = materialise(body)
    headers = forged_headers(recipe, data)
    chosen = ctype or natural_ct
    if chosen is not None:
        headers.append(("Content-Type", chosen))
    before = snapshot(live)
    answer = send(live, data, headers)
    assert answer.status == 401, f"{recipe}: {answer}"
    assert_nothing_stored(live, before, answer)


garbage = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=400), content_type),
    st.tuples(
        st.just("json-not-object"),
        json_value.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
        content_type,
    ),
    st.tuples(
        st.just("object-without-string-type"),
        st.dictionaries(json_key, json_value, max_size=5)
        .filter(lambda d: not isinstance(d.get("type"), str))
        .map(lambda d: json.dumps(d).encode()),
        content_type,
    ),
    st.tuples(
        st.just("form-payload-not-an-object"),
        (odd_text | json_value.filter(lambda v: not isinstance(v, dict)).map(json.dumps)).map(
            lambda p: urllib.parse.urlencode({"payload": p}, errors="surrogatepass").encode()
        ),
        st.just(FORM_CT),
    ),
    st.tuples(
        st.just("form-without-payload"),
        st.dictionaries(
            json_key.filter(lambda k: k not in ("payload", "command")), odd_text, max_size=4
        ).map(lambda d: urllib.parse.urlencode(d, errors="surrogatepass").encode()),
        st.just(FORM_CT),
    ),
    st.tuples(st.just("event-as-form"), st.just(b"event"), st.just(FORM_CT)),
    st.tuples(
        st.just("click-as-json"),
        st.just(b"click"),
        st.sampled_from([JSON_CT, "text/plain", None, "multipart/form-data; boundary=hx"]),
    ),
    st.tuples(st.just("bom-event"), st.just(b"bom"), st.just(JSON_CT)),
    st.tuples(
        st.just("multipart"), st.just(b"multipart"), st.just("multipart/form-data; boundary=hx")
    ),
)


def materialise_garbage(kind: str, body: bytes) -> bytes:
    if kind == "event-as-form":
        return as_json(envelope(message_event("wrong content type")))
    if kind == "click-as-json":
        return as_form(click(OWNER, STANDING))
    if kind == "bom-event":
        return b"\xef\xbb\xbf" + as_json(envelope(message_event("bom")))
    if kind == "multipart":
        payload = json.dumps(click(OWNER, STANDING))
        return (
            f'--hx\r\nContent-Disposition: form-data; name="payload"\r\n\r\n{payload}\r\n--hx--\r\n'
        ).encode()
    return body


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(case=garbage)
def test_fuzz_signed_garbage_is_refused_and_stores_nothing(
    live: Live, case: tuple[str, bytes, str | None]
) -> None:
    kind, recipe, ctype = case
    body = materialise_garbage(kind, recipe)
    if kind in ("bytes", "json-not-object", "object-without-string-type"):
        # A form body with a `payload` or `command` field, or a JSON object with a string
        # `type`, is not garbage; random bytes almost never are, but keep them out.
        assume(b"payload" not in body and b"command" not in body and not _slack_object(body))
    if kind == "form-payload-not-an-object":
        payload = urllib.parse.parse_qs(body.decode("ascii"), keep_blank_values=True)["payload"][0]
        assume(not _slack_object(payload.encode("utf-8", "surrogatepass")))
    FUZZ["signed-garbage"] += 1
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    # slack_sdk decodes the body as UTF-8 to sign it: bytes that are not UTF-8 cannot carry
    # a valid signature (401); everything else is signed and malformed (400).
    expected = 400 if _utf8(body) else 401
    assert answer.status == expected, f"{kind} as {ctype!r}: {answer}"
    assert_nothing_stored(live, before, answer)


unhandled_type = st.sampled_from(
    [
        "url_verification",
        "app_rate_limited",
        "view_submission",
        "view_closed",
        "shortcut",
        "message_action",
        "block_suggestion",
        "interactive_message",
        "dialog_submission",
        "ssl_check",
        "command",
        "",
        "EVENT_CALLBACK",
        "event_callback ",
        "block_actions\x00",
    ]
) | st.text(max_size=16).filter(lambda t: t not in ("event_callback", "block_actions"))


@settings(max_examples=200, **FUZZ_SETTINGS)
@given(
    kind=unhandled_type,
    extra=st.dictionaries(json_key.filter(lambda k: k != "type"), json_value, max_size=4),
    as_form_payload=st.booleans(),
)
def test_fuzz_signed_unhandled_types_store_nothing(
    live: Live, kind: str, extra: dict[str, Any], as_form_payload: bool
) -> None:
    FUZZ["unhandled-types"] += 1
    doc = {"type": kind, **extra}
    body, ctype = (as_form(doc), FORM_CT) if as_form_payload else (as_json(doc), JSON_CT)
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    assert answer.status in (200, 400), f"{doc!r}: {answer}"
    assert_nothing_stored(live, before, answer)


def _mutated_envelope(base: str, changes: list[Any]) -> dict[str, Any]:
    event = message_event("fuzz") if base == "message" else mention_event("<@UBOT> fuzz")
    return mutated(envelope(event), changes)


@settings(max_examples=200, **FUZZ_SETTINGS)
@given(base=st.sampled_from(["message", "mention"]), changes=mutations(MESSAGE_PATHS))
def test_fuzz_mutated_envelopes_are_never_5xx_and_store_only_well_typed_events(
    live: Live, base: str, changes: list[Any]
) -> None:
    """Two rules on each mutated envelope: the answer is 200 or 400 (a 400 stores nothing),
    and whatever is stored is one well-typed event and nothing else."""
    FUZZ["mutated-envelopes"] += 1
    doc = _mutated_envelope(base, changes)
    body = as_json(doc)
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status in (200, 400), f"{changes!r}: {answer}"
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
    after = snapshot(live)
    assert (after.outbox, after.approvals, after.answered, after.steps) == (
        before.outbox,
        before.approvals,
        before.answered,
        before.steps,
    ), f"{changes!r}: {answer}"
    stored = new_events(live, before)
    assert len(stored) <= 1, f"{changes!r}: one request stored {len(stored)} events"
    for event in stored:
        assert_well_typed(event, doc)


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(action=st.sampled_from([blocks.APPROVE, blocks.DENY]), changes=mutations(CLICK_PATHS))
def test_fuzz_mutated_clicks_are_never_5xx_and_answer_nothing(
    live: Live, action: str, changes: list[Any]
) -> None:
    """An intruder's click on OWNER's standing approval, mutated: the answer is 200 or 400 (a
    400 stores nothing), the approval stays unanswered, and at most an ephemeral note to the
    clicker is written."""
    FUZZ["mutated-clicks"] += 1
    doc = mutated(click(INTRUDER, STANDING, action), changes)
    body = as_form(doc)
    before = snapshot(live)
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status in (200, 400), f"{changes!r}: {answer}"
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
    state = live.store.approval(STANDING)
    assert state is not None and state.answer is None, f"{changes!r} answered it: {state}"
    assert_only_ephemerals_for(live, before, _clicker(doc), answer)
