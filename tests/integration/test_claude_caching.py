"""Issue 24 on the engine's clock: the Claude agent's prompt-cache breakpoints, the usage the
fake Messages API computes for them (as the real API does), what a run logs and costs, model
calls a retried run replays instead of repeating, and feedback counted for the digest.

The real anthropic SDK talks to the fake (tests/support/fake_anthropic.py), whose clock is the
world's: five minutes or an hour pass in no time. Both stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import T0
from tests.support import fake_anthropic as api
from tests.support.claude_world import INBOX, TEAM, USER, World, _agents
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.agents import Feedback, InvalidInput
from wakeful.bot.builtin.claude import factory
from wakeful.bot.builtin.claude_prices import PRICES, Price, prices
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import make_setup
from wakeful.core import metrics
from wakeful.core.clock import ManualClock
from wakeful.core.store import Store
from wakeful.devtools.audit import runs

SONNET = "claude-sonnet-5"
LONG = "Tell me about the order book, the refunds this week and what is still open. " * 8


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def fake(clock: ManualClock) -> Iterator[FakeAnthropic]:
    server = FakeAnthropic(clock=lambda: float(clock.now))
    yield server
    server.close()
    assert server.unscripted == 0 and server.refused == []
    assert server.left == 0, "a scripted reply was never asked for"


@pytest.fixture(autouse=True)
def _close_agents() -> Iterator[None]:
    yield
    while _agents:
        _agents.pop().close()


def world(store: Store, fake: FakeAnthropic, clock: ManualClock, **options: Any) -> World:
    return World(store, fake, clock=clock, model=options.pop("model", SONNET), **options)


def marks(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where the request's breakpoints are: ('system' | 'message <i>', cache_control)."""
    found = [("system", b["cache_control"]) for b in request["system"] if "cache_control" in b]
    for i, turn in enumerate(request["messages"]):
        for block in turn["content"]:
            if "cache_control" in block:
                found.append((f"message {i}", block["cache_control"]))
    assert not any("cache_control" in t for t in request.get("tools", []))
    return found


def chat(w: World, text: str, answer: str, at: int) -> api.Usage:
    w.say(text)
    w.fake.script(api.text(answer))
    w.tick(at)
    return w.fake.usages[-1]


# -- breakpoints and what the API bills for them ------------------------------------------------


def test_breakpoints_sit_on_the_stable_prefix_the_saved_history_and_the_newest_turn(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock)
    first = chat(w, LONG, "Here is the order book: nothing open.", T0)
    second = chat(w, "and refunds?", "No refunds this week.", T0 + 60)
    one, two = fake.requests
    ephemeral = {"type": "ephemeral"}
    system = [("system", ephemeral)] * 2  # the prompt, then the memory listing
    assert marks(one) == [*system, ("message 0", ephemeral)]
    assert marks(two) == [*system, ("message 1", ephemeral), ("message 2", ephemeral)]
    # The first call writes the prefix through its turn; the second reads all of it back and
    # writes only what is new (the answer and the new turn).
    assert first.cache_read == 0 and first.cache_write > 1024 and first.input_tokens == 0
    assert second.cache_read == first.cache_write
    assert second.cache_write < first.cache_write / 4
    assert second.billed_input() < 0.35 * (second.cache_read + second.cache_write)
    # Nothing of the markers is saved: the session holds the conversation as it was.
    assert "cache_control" not in json.dumps(w.session())


@pytest.mark.parametrize(
    ("setting", "expected"),
    [("1h", [{"type": "ephemeral", "ttl": "1h"}] * 3), ("off", [])],
)
def test_the_ttl_setting_is_on_every_breakpoint_or_there_are_none(
    store: Store, fake: FakeAnthropic, clock: ManualClock, setting: str, expected: list[Any]
) -> None:
    w = world(store, fake, clock, cache=setting)
    usage = chat(w, LONG, "Noted.", T0)
    assert [control for _, control in marks(fake.requests[0])] == expected
    if setting == "off":
        assert (usage.cache_write, usage.cache_read) == (0, 0)
    else:
        assert usage.cache_1h > 0 and usage.cache_5m == 0


def test_a_bad_ttl_or_price_setting_stops_start_up_naming_it(store: Store) -> None:
    config = Config()
    for env, named in (
        ({"WAKEFUL_CLAUDE_CACHE_TTL": "10m"}, "WAKEFUL_CLAUDE_CACHE_TTL"),
        ({"WAKEFUL_CLAUDE_PRICES": "{not json"}, "WAKEFUL_CLAUDE_PRICES"),
        ({"WAKEFUL_CLAUDE_PRICES": '{"m": {"input": 1}}'}, "needs an input and an output"),
        ({"WAKEFUL_CLAUDE_PRICES": '{"m": {"input": 1, "output": 2, "x": 1}}'}, "has x"),
    ):
        setup = make_setup(config, store, lambda _u: "", {"ANTHROPIC_API_KEY": "k", **env})
        with pytest.raises(InvalidInput, match=named):
            factory(setup)


def test_an_expired_prefix_is_written_again_and_a_short_one_is_never_cached(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock)
    chat(w, LONG, "One.", T0)
    late = chat(w, "still there?", "Two.", T0 + 301)  # past the 5-minute TTL
    assert late.cache_read == 0 and late.cache_write > 1024
    soon = chat(w, "and now?", "Three.", T0 + 301 + 299)  # within it: read again
    assert soon.cache_read > 1024

    # A model whose minimum cacheable prompt is 4,096 tokens caches none of this.
    haiku = World(store, fake, clock=clock, model="claude-haiku-4-5")
    haiku.say("hi")
    fake.script(api.text("Hi."))
    haiku.tick(T0 + 1000)
    small = fake.usages[-1]
    assert (small.cache_write, small.cache_read) == (0, 0) and small.input_tokens > 1024


def test_a_digest_within_the_hour_writes_for_an_hour_and_the_next_one_reads_it(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock)
    w.say("send me a digest every hour")
    fake.script(
        api.tool_use("set_digest", {"mode": "every", "every_seconds": 3600}, "toolu_d1"),
        api.text("Digest set: hourly."),
    )
    w.tick(T0)
    assert {c.get("ttl", "5m") for _, c in marks(fake.requests[-1])} == {"5m"}
    digests = []
    for hour in (1, 2):
        fake.script(api.text(f"Digest {hour}: quiet."))
        w.tick(T0 + hour * 3600)
        digests.append(fake.usages[-1])
        assert {c.get("ttl") for _, c in marks(fake.requests[-1])} == {"1h"}
    assert digests[0].cache_1h > 0
    # An hour later the 1-hour entry is still there (the 5-minute one long gone).
    assert digests[1].cache_read >= digests[0].cache_write


# -- what a run logs and costs ----------------------------------------------------------------


def test_a_runs_usage_is_logged_with_its_cost_and_counted_in_the_metrics(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    def sample(kind: str) -> float:
        labels = {"model": SONNET, "kind": kind}
        return metrics.REGISTRY.get_sample_value("wakeful_model_tokens_total", labels) or 0.0

    before = {k: sample(k) for k in ("input", "output", "cache_write", "cache_read")}
    cost_before = metrics.REGISTRY.get_sample_value(
        "wakeful_model_cost_dollars_total", {"model": SONNET}
    )
    w = world(store, fake, clock)
    chat(w, LONG, "One.", T0)
    chat(w, "again", "Two.", T0 + 30)
    log = runs(store, INBOX)
    assert len(log) == 2
    for run, u in zip(log, fake.usages, strict=True):
        logged = run.usage[SONNET]
        assert (logged.input, logged.output, logged.cache_write, logged.cache_read) == (
            u.input_tokens,
            u.output_tokens,
            u.cache_write,
            u.cache_read,
        )
        price = PRICES[SONNET]
        expected = price.cost(u.input_tokens, u.output_tokens, u.cache_5m, u.cache_1h, u.cache_read)
        assert logged.cost == pytest.approx(expected)
    after = {k: sample(k) - before[k] for k in before}
    assert after["cache_read"] == sum(u.cache_read for u in fake.usages)
    assert after["output"] == sum(u.output_tokens for u in fake.usages)
    cost = metrics.REGISTRY.get_sample_value("wakeful_model_cost_dollars_total", {"model": SONNET})
    assert (cost or 0) - (cost_before or 0) == pytest.approx(
        sum(r.usage[SONNET].cost or 0 for r in log)
    )


def test_the_price_table_is_one_setting_away() -> None:
    override = {
        "claude-sonnet-5": {"input": 1, "output": 2},
        "my-model": {"input": 4, "output": 8, "cache_read": 1},
    }
    table = prices(json.dumps(override))
    assert table["claude-sonnet-5"] == Price(1, 2, 1.25, 2, 0.1)
    assert table["my-model"].cache_read == 1 and table["my-model"].cache_write_1h == 8
    assert PRICES["claude-sonnet-5"].input == 3  # the table itself is untouched
    from wakeful.bot.builtin.claude_prices import price_of

    assert price_of(PRICES, "claude-sonnet-5-20261001") == PRICES["claude-sonnet-5"]
    assert price_of(PRICES, "claude-test") is None


# -- the history at its cap ---------------------------------------------------------------------


def test_at_its_cap_the_history_is_cut_at_once_and_the_next_turns_read_the_cache(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock, token_budget=3000)
    sizes, usages = [], []
    for n in range(12):
        usages.append(chat(w, f"turn {n}: {LONG}", f"answer {n}: " + "fine. " * 60, T0 + 30 * n))
        sizes.append(len(w.session()["messages"]))
    cuts = [i for i in range(1, len(sizes)) if sizes[i] < sizes[i - 1]]
    assert cuts, sizes
    # Cut to two thirds of the cap at once: the turns after a cut keep its start, and read.
    # The cut turn's call still had the whole conversation (it read it), with the note to save
    # what matters to memory; the turn after it writes the new start once.
    assert all(sizes[i + 1] > sizes[i] for i in cuts if i + 1 < len(sizes))
    assert all(usages[i].cache_read > usages[i].cache_write for i in cuts)
    after_cut = [usages[i + 2] for i in cuts if i + 2 < len(usages)]
    assert after_cut and all(u.cache_read > u.cache_write for u in after_cut)


# -- model calls a retry does not repeat ------------------------------------------------------


def test_a_retried_run_replays_its_answers_and_tool_results_and_makes_only_the_rest(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock)
    w.say("remind me in an hour to stretch")
    fake.script(
        api.tool_use("remind_me", {"text": "stretch", "in_seconds": 3600}, "toolu_r1"),
        api.error(529),
    )
    w.tick(T0)
    [event] = store.events(INBOX)
    assert event.status == "pending" and "529" in (event.error or "")
    assert store.timers(INBOX) == []  # a failed run writes nothing
    assert runs(store, INBOX)[-1].usage[SONNET].calls == 1  # but its billed call is logged
    fake.script(api.text("I will remind you at the hour."))
    w.tick(T0 + 30)
    assert len(fake.requests) == 3  # the first answer was replayed, not asked for again
    retry = api.plain(fake.requests[2]["messages"])
    assert retry[1]["content"][0]["id"] == "toolu_r1"
    assert retry[:-1] == api.plain(fake.requests[1]["messages"][:-1])
    [timer] = store.timers(INBOX)
    assert timer.next_at == T0 + 3600  # the time the replayed call was made, not the retry's
    assert [r.text for r in w.replies()] == ["I will remind you at the hour."]
    logged = runs(store, INBOX)[-1].usage[SONNET]
    assert (logged.calls, logged.replayed) == (1, 1)


# -- feedback on replies ----------------------------------------------------------------------


def test_feedback_costs_no_call_and_is_counted_in_the_next_digest(
    store: Store, fake: FakeAnthropic, clock: ManualClock
) -> None:
    w = world(store, fake, clock)
    w.say("digest every hour please")
    fake.script(
        api.tool_use("set_digest", {"mode": "every", "every_seconds": 3600}, "toolu_f1"),
        api.text("Done."),
    )
    w.tick(T0)
    for n, value in enumerate(("positive", "negative", "negative")):
        click = Feedback(value=value, user=USER, team=TEAM, channel="D1", message_ts=f"{T0}.1")
        store.ingest(INBOX, "slack", f"feedback:{n}", click.to_wire(), T0 + 10)
    calls = len(fake.requests)
    w.tick(T0 + 20)
    assert len(fake.requests) == calls  # no model call for feedback alone
    fake.script(api.text("Your digest."))
    w.tick(T0 + 3600)
    told = "\n".join(b["text"] for b in fake.requests[-1]["messages"][-1]["content"])
    assert "feedback on replies: 1 positive, 2 negative" in told
    assert told.count("<wakeful_feedback ") == 3
    stats = w.session()["stats"]
    assert (stats.get("feedback_positive", 0), stats.get("feedback_negative", 0)) == (0, 0)
