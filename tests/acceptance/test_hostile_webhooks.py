"""Hostile input against the webhook endpoints of the real HTTP front: SlackFront with GitHub,
Stripe and a generic source over a SQLite file, served by the product's waitress server and
spoken to over real HTTP (hypothesis generates bodies, headers, signatures and timestamps).

The rules under test (bot/front/webhooks.py, the /webhooks/ route of bot/front/wsgi.py):
- the signature is checked before anything in the body is read: a forged, shifted, stale or
  future-dated, truncated or doubled signature is a 401, and nothing reaches the store;
- a correctly signed delivery the app cannot read (not a JSON object, no delivery id, no event
  type) is a 400 and stores nothing;
- a correctly signed, readable delivery is a 200 that stores exactly one event under
  (source, delivery id), with a well-typed payload the built-in agent can report in one line;
  the same delivery again stores nothing;
- never a 5xx, never a hang (the Slack suite's client timeout), never a dropped connection.

"Stores nothing" is checked on the events and outbox tables before and after each request.
The fuzz tests count the requests they send; the total is printed at the end (run with -s).
"""

from __future__ import annotations

import copy
import json
import logging
import re
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_values import FUZZ_SETTINGS, header_text, json_value
from tests.support.hostile import Answer
from tests.support.hostile import send as send_raw
from tests.support.webhook_front import start_server
from wakeful.bot.builtin.webhook_report import report_line
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.webhooks import STRIPE_TOLERANCE
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.process.config import WebhookSource
from wakeful.core.events import WebhookDelivery
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import StoredEvent
from wakeful.core.runner import typed
from wakeful.core.store import Store, open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.webhooks import (
    GITHUB_EVENTS,
    STRIPE_EVENTS,
    github_payload,
    github_signature,
    hmac_hex,
    stripe_event,
    stripe_signature,
)

GITHUB_SECRET = "hostile-github-secret"
STRIPE_SECRET = "whsec_hostile_secret"
CI_SECRET = "hostile-ci-secret"
OPS = "C0HXOPS"
MARGIN = 3
"""Seconds kept away from the Stripe tolerance's edge: the clock ticks between sign and check."""
FUZZ: Counter[str] = Counter()
Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Live:
    store: Store
    port: int


@pytest.fixture(scope="module", autouse=True)
def fuzz_report() -> Iterator[None]:
    yield
    detail = ", ".join(f"{name}={n}" for name, n in sorted(FUZZ.items()))
    print(f"\nhostile-webhook fuzz cases run: {sum(FUZZ.values())} ({detail})")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    quiet = logging.getLogger("waitress")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    db: Path = tmp_path_factory.mktemp("hostile-webhooks") / "hostile.db"
    store = open_store(db)
    sources = (
        WebhookSource("github", "github", GITHUB_SECRET, OPS),
        WebhookSource("stripe", "stripe", STRIPE_SECRET, OPS),
        WebhookSource("ci", "generic", CI_SECRET, OPS),
    )
    front = SlackFront(Listeners(store, "hostile-slack-secret"), webhook_sources=sources)
    port, stop = start_server(front)
    try:
        yield Live(store, port)
    finally:
        stop()
        store.close()
        quiet.setLevel(level)


def send(live: Live, path: str, body: bytes, headers: Headers) -> Answer:
    """One POST on a fresh connection (the Slack suite's client: no answer in its timeout, or a
    dropped connection, fails the test)."""
    return send_raw(live, body, headers, path=path)  # type: ignore[arg-type]


def snapshot(live: Live) -> tuple[int, int]:
    return count_events(live.store), len(live.store.outbox())


def assert_nothing_stored(live: Live, before: tuple[int, int], answer: Answer | str) -> None:
    assert snapshot(live) == before, f"the store changed after {answer}"


def assert_one_well_typed_delivery(
    live: Live, source: str, delivery: str, answer: Answer
) -> StoredEvent:
    """A 200 stored exactly this delivery, in the shape every agent is promised."""
    event = live.store.event_by_key(source, delivery)
    assert event is not None, f"{answer} but nothing stored under ({source}, {delivery!r})"
    assert event.inbox == InboxId.conversation(OPS)
    got = typed(event)  # what the agent receives
    assert isinstance(got, WebhookDelivery), event.payload
    assert (got.source, got.delivery_id, got.channel) == (source, delivery, OPS)
    assert isinstance(got.body, dict), event.payload
    assert got.type is None or isinstance(got.type, str), event.payload
    line = report_line(got)
    assert isinstance(line, str) and line and "\n" not in line, line
    assert "<" not in line and ">" not in line, f"unescaped mrkdwn in {line!r}"
    return event


# -- signing helpers (the documented algorithms) ------------------------------------------------


def github_headers(body: bytes, delivery: str, event: str = "issues") -> list[tuple[str, str]]:
    return [
        ("X-GitHub-StoredEvent", event),
        ("X-GitHub-Delivery", delivery),
        ("X-Hub-Signature-256", github_signature(GITHUB_SECRET, body)),
        ("Content-Type", "application/json"),
    ]


def stripe_headers(body: bytes, at: int | None = None) -> list[tuple[str, str]]:
    stamp = int(time.time()) if at is None else at
    return [
        ("Stripe-Signature", stripe_signature(STRIPE_SECRET, body, stamp)),
        ("Content-Type", "application/json; charset=utf-8"),
    ]


def generic_headers(body: bytes, delivery: str) -> list[tuple[str, str]]:
    return [
        ("X-Wakeful-Signature", github_signature(CI_SECRET, body)),
        ("X-Wakeful-Delivery", delivery),
        ("Content-Type", "application/json"),
    ]


# -- strategies -----------------------------------------------------------------------------------

mrkdwn_text = st.sampled_from(["<!channel>", "<!here|here>", "&amp;", "<@U0HX|boss>", "a > b"])
"""Text that would page or mention people if a report line passed it through unescaped."""
webhook_value = json_value | mrkdwn_text


def fixture_body(source: str, name: str) -> bytes:
    if source == "stripe":
        return json.dumps(stripe_event(name), indent=2).encode()
    return github_payload(name)


valid_body = st.one_of(
    st.sampled_from(GITHUB_EVENTS).map(lambda n: fixture_body("github", n)),
    st.sampled_from(STRIPE_EVENTS).map(lambda n: fixture_body("stripe", n)),
)
any_body = valid_body | st.binary(max_size=300) | json_value.map(lambda v: json.dumps(v).encode())
sha256_forgery = st.one_of(
    st.tuples(st.just("no-signature"), st.none()),
    st.tuples(st.just("wrong-secret"), st.text(max_size=40)),
    st.tuples(st.just("other-bytes"), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("truncated"), st.integers(0, 70)),
    st.tuples(
        st.just("prefix"), st.sampled_from(["", "sha1=", "SHA256=", "sha256 =", "sha512=", "v0="])
    ),
    st.tuples(st.just("upper-hex"), st.none()),
    st.tuples(st.just("garbage"), header_text),
    st.tuples(st.just("doubled"), st.none() | header_text),
    st.tuples(st.just("underscore-header"), st.none()),
)
stripe_forgery = st.one_of(
    st.tuples(st.just("no-signature"), st.none()),
    st.tuples(
        st.just("stale-or-future"),
        st.integers(STRIPE_TOLERANCE + MARGIN, 10**9)
        | st.integers(-(10**9), -STRIPE_TOLERANCE - MARGIN),
    ),
    st.tuples(
        st.just("shifted-timestamp"),
        st.integers(-STRIPE_TOLERANCE, STRIPE_TOLERANCE).filter(bool),
    ),
    st.tuples(st.just("wrong-secret"), st.text(max_size=40)),
    st.tuples(st.just("other-bytes"), st.binary(min_size=1, max_size=40)),
    st.tuples(
        st.just("bad-timestamp"),
        header_text.filter(lambda s: not s.isdigit())
        | st.sampled_from(["-1", "+1700000000", "1e9", "1.7e9", "0x65", "²³", "9" * 13]),
    ),
    st.tuples(st.just("only-v0"), st.none()),
    st.tuples(st.just("two-timestamps"), st.integers(-5, 5)),
    st.tuples(st.just("truncated"), st.integers(0, 63)),
    st.tuples(st.just("garbage"), header_text),
)


def forged_sha256(
    recipe: tuple[str, Any], body: bytes, secret: str, name: str
) -> list[tuple[str, str]]:
    kind, arg = recipe
    good = github_signature(secret, body)
    if kind == "no-signature":
        return []
    if kind == "wrong-secret":
        assume(arg != secret)
        return [(name, github_signature(arg, body))]
    if kind == "other-bytes":
        return [(name, github_signature(secret, body + arg))]
    if kind == "truncated":
        return [(name, good[:arg])]
    if kind == "prefix":
        return [(name, arg + good[7:])]
    if kind == "upper-hex":
        return [(name, "sha256=" + good[7:].upper())]
    if kind == "garbage":
        assume(arg.strip() != good)
        return [(name, arg)]
    if kind == "doubled":
        return [(name, good), (name, good if arg is None else arg)]
    if kind == "underscore-header":
        return [(name.replace("-", "_"), good)]
    raise AssertionError(kind)


def forged_stripe(recipe: tuple[str, Any], body: bytes) -> list[tuple[str, str]]:
    kind, arg = recipe
    now = int(time.time())
    name = "Stripe-Signature"
    good = stripe_signature(STRIPE_SECRET, body, now)
    if kind == "no-signature":
        return []
    if kind == "stale-or-future":
        return [(name, stripe_signature(STRIPE_SECRET, body, now + arg))]
    if kind == "shifted-timestamp":  # signed at one time, claimed at another
        return [(name, good.replace(f"t={now}", f"t={now + arg}"))]
    if kind == "wrong-secret":
        assume(arg != STRIPE_SECRET)
        return [(name, stripe_signature(arg, body, now))]
    if kind == "other-bytes":
        return [(name, stripe_signature(STRIPE_SECRET, body + arg, now))]
    if kind == "bad-timestamp":
        digest = hmac_hex(STRIPE_SECRET, f"{arg}.".encode("latin-1") + body)
        return [(name, f"t={arg},v1={digest}")]
    if kind == "only-v0":
        return [(name, good.replace("v1=", "v0="))]
    if kind == "two-timestamps":
        return [(name, f"t={now + arg},{good}")]
    if kind == "truncated":
        return [(name, good[: len(good) - 64 + arg])]
    if kind == "garbage":
        return [(name, arg)]
    raise AssertionError(kind)


# -- forgeries: 401, nothing stored -------------------------------------------------------------


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(
    source=st.sampled_from(["github", "ci"]),
    body=any_body,
    recipe=sha256_forgery,
    event=st.sampled_from(["issues", "ping", "push"]) | header_text,
)
def test_fuzz_forged_sha256_deliveries_are_401_and_store_nothing(
    live: Live, source: str, body: bytes, recipe: tuple[str, Any], event: str
) -> None:
    FUZZ["forged-sha256"] += 1
    delivery = str(uuid.uuid4())
    if source == "github":
        headers = [("X-GitHub-StoredEvent", event), ("X-GitHub-Delivery", delivery)]
        headers += forged_sha256(recipe, body, GITHUB_SECRET, "X-Hub-Signature-256")
    else:
        headers = [("X-Wakeful-Delivery", delivery)]
        headers += forged_sha256(recipe, body, CI_SECRET, "X-Wakeful-Signature")
    before = snapshot(live)
    answer = send(live, f"/webhooks/{source}", body, headers)
    assert answer.status == 401, f"{recipe}: {answer}"
    assert_nothing_stored(live, before, answer)


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(body=any_body, recipe=stripe_forgery)
def test_fuzz_forged_stripe_deliveries_are_401_and_store_nothing(
    live: Live, body: bytes, recipe: tuple[str, Any]
) -> None:
    FUZZ["forged-stripe"] += 1
    before = snapshot(live)
    answer = send(live, "/webhooks/stripe", body, forged_stripe(recipe, body))
    assert answer.status == 401, f"{recipe}: {answer}"
    assert_nothing_stored(live, before, answer)


@settings(max_examples=100, **FUZZ_SETTINGS)
@given(
    name=st.text(max_size=20).filter(lambda n: n not in ("github", "stripe", "ci")),
    body=any_body,
)
def test_fuzz_unknown_sources_are_404_whatever_they_carry(
    live: Live, name: str, body: bytes
) -> None:
    FUZZ["unknown-source"] += 1
    path = "/webhooks/" + urllib.parse.quote(name, safe="")
    before = snapshot(live)
    answer = send(live, path, body, github_headers(body, str(uuid.uuid4())))
    assert answer.status == 404, answer
    assert_nothing_stored(live, before, answer)


# -- timestamps: inside the tolerance is taken, outside is 401 ------------------------------------


@settings(max_examples=60, **FUZZ_SETTINGS)
@given(offset=st.integers(-(STRIPE_TOLERANCE - MARGIN), STRIPE_TOLERANCE - MARGIN))
def test_fuzz_a_stripe_timestamp_inside_the_tolerance_is_taken_once(
    live: Live, offset: int
) -> None:
    FUZZ["stripe-timestamp"] += 1
    event = stripe_event("charge.succeeded")
    body = json.dumps(event).encode()
    answer = send(live, "/webhooks/stripe", body, stripe_headers(body, int(time.time()) + offset))
    assert answer.status == 200, f"offset {offset}: {answer}"
    assert_one_well_typed_delivery(live, "stripe", event["id"], answer)
    before = snapshot(live)
    again = send(live, "/webhooks/stripe", body, stripe_headers(body))
    assert again.status == 200 and again.body == b"duplicate delivery; already stored", again
    assert_nothing_stored(live, before, again)


# -- signed but unreadable: 400, nothing stored; readable: one event ------------------------------


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(
    source=st.sampled_from(["github", "stripe", "ci"]),
    body=st.binary(max_size=300) | json_value.map(lambda v: json.dumps(v).encode()),
    ctype=st.sampled_from(
        ["application/json", "application/x-www-form-urlencoded", "text/plain", ""]
    )
    | header_text,
)
def test_fuzz_signed_garbage_is_never_5xx_and_stores_only_what_it_answers_200(
    live: Live, source: str, body: bytes, ctype: str
) -> None:
    FUZZ["signed-garbage"] += 1
    delivery = str(uuid.uuid4())
    if source == "github":
        headers = github_headers(body, delivery)
    elif source == "stripe":
        headers = stripe_headers(body)
    else:
        headers = generic_headers(body, delivery)
    headers = [(k, v) for k, v in headers if k != "Content-Type"] + [("Content-Type", ctype)]
    before = snapshot(live)
    answer = send(live, f"/webhooks/{source}", body, headers)
    assert answer.status in (200, 400), answer
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
        return
    key = delivery
    if source == "stripe":
        key = json.loads(body)["id"]
    assert answer.body in (b"stored", b"duplicate delivery; already stored"), answer
    if answer.body == b"stored":
        assert snapshot(live)[0] == before[0] + 1
        assert_one_well_typed_delivery(live, source, key, answer)
    else:
        assert_nothing_stored(live, before, answer)


@settings(max_examples=200, **FUZZ_SETTINGS)
@given(
    event=header_text,
    delivery=header_text,
    name=st.sampled_from(GITHUB_EVENTS),
)
def test_fuzz_github_headers_are_checked_not_trusted(
    live: Live, event: str, delivery: str, name: str
) -> None:
    FUZZ["github-headers"] += 1
    body = github_payload(name)
    before = snapshot(live)
    answer = send(live, "/webhooks/github", body, github_headers(body, delivery, event))
    assert answer.status in (200, 400), answer
    if answer.status == 400:
        assert_nothing_stored(live, before, answer)
    elif answer.body == b"stored":
        stored = assert_one_well_typed_delivery(live, "github", delivery.strip(), answer)
        assert stored.payload["type"] == event.strip()
        # What reaches the agent as an event type is an event name, never arbitrary text.
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,63}", stored.payload["type"]), stored.payload


PATHS: dict[str, list[tuple[str | int, ...]]] = {
    "issues.opened": [
        ("action",),
        ("issue",),
        ("issue", "title"),
        ("issue", "html_url"),
        ("repository",),
        ("repository", "full_name"),
        ("organization",),
    ],
    "push": [("ref",), ("compare",), ("repository",), ("repository", "html_url"), ("commits",)],
    "workflow_run.completed": [
        ("workflow",),
        ("workflow", "name"),
        ("workflow_run",),
        ("workflow_run", "conclusion"),
        ("workflow_run", "status"),
        ("workflow_run", "html_url"),
    ],
    "charge.succeeded": [
        ("id",),
        ("type",),
        ("data",),
        ("data", "object"),
        ("data", "object", "id"),
        ("data", "object", "amount"),
        ("data", "object", "currency"),
    ],
}
DELETE = object()


Change = tuple[tuple[str | int, ...], Any]


def mutated(doc: dict[str, Any], changes: list[Change]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for path, value in changes:
        parent: Any = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            if value is DELETE:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = copy.deepcopy(value)
    return out


@st.composite
def mutated_delivery(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(PATHS)))
    doc = stripe_event(name) if name == "charge.succeeded" else json.loads(github_payload(name))
    change = st.tuples(st.sampled_from(PATHS[name]), st.just(DELETE) | webhook_value)
    return name, mutated(doc, draw(st.lists(change, min_size=1, max_size=3)))


def _titled(title: Any) -> tuple[str, dict[str, Any]]:
    return "issues.opened", mutated(
        json.loads(github_payload("issues.opened")), [(("issue", "title"), title)]
    )


@settings(max_examples=300, **FUZZ_SETTINGS)
@given(case=mutated_delivery())
@example(case=_titled("<!channel> & <@U0HX|boss>"))
@example(case=_titled(["<!here>"]))
def test_fuzz_mutated_payloads_are_stored_well_typed_or_refused(
    live: Live, case: tuple[str, dict[str, Any]]
) -> None:
    FUZZ["mutated-payload"] += 1
    name, doc = case
    body = json.dumps(doc).encode()
    before = snapshot(live)
    if name == "charge.succeeded":
        answer = send(live, "/webhooks/stripe", body, stripe_headers(body))
        key = doc.get("id")
        source = "stripe"
    else:
        key = str(uuid.uuid4())
        answer = send(live, "/webhooks/github", body, github_headers(body, key, name.split(".")[0]))
        source = "github"
    assert answer.status in (200, 400), answer
    if answer.status == 400 or answer.body != b"stored":
        assert_nothing_stored(live, before, answer)
        return
    assert isinstance(key, str)
    assert_one_well_typed_delivery(live, source, key, answer)
