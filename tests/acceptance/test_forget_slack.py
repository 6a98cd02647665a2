"""Issue 38 through the real HTTP front, on both stores: `/wakeful memory` shows a person what is
kept about them, `/wakeful forget` asks with Forget and Cancel buttons and erases nothing until
that person presses Forget; then the prompt becomes `Forgotten.` in place and no byte of their
words is left in the store's files (SQLite's file and WAL, PostgreSQL's pages) while another
person's stay, their event rows still there.

One `wakeful serve` per backend for the module (the signed requests and the emulator as in
tests/support/slack_app.py); the emulator shows what each response_url posts as Slack would, so the
tests read what the person sees.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.raw_bytes import pg_tables_holding, sqlite_files_holding
from tests.support.slack_app import (
    Wakeful,
    dm,
    eventually,
    inbox,
    serving,
    settle,
)
from wakeful.bot.slack.home import MEMORY_LINE
from wakeful.bot.slack.privacy import FORGET, FORGET_CANCEL
from wakeful.core.memory import MemoryChange
from wakeful.core.privacy_text import CANCELLED, FORGET_QUESTION, FORGOTTEN
from wakeful.core.store.memory import write_memory

PATH = "/memories/locker.md"
SECOND = "tell <!channel> & <@U1>"
"""A stored line Slack would act on if it were not escaped."""


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Wakeful]:
    """`wakeful serve` on each backend, with the emulator it posts to."""
    with serving(request.param, tmp_path_factory.mktemp(f"forget-{request.param}")) as running:
        yield running


def holders(app: Wakeful, marker: str) -> list[str]:
    """Where the store's raw bytes hold `marker`: SQLite files, or PostgreSQL relations."""
    if app.backend == "sqlite":
        return sqlite_files_holding(app.db, marker)
    [options] = parse_qs(urlsplit(app.db).query)["options"]
    schema = options.removeprefix("-csearch_path=")
    return pg_tables_holding(os.environ["WAKEFUL_TEST_PG_DSN"], schema, marker)


def remember(app: Wakeful, user: str, text: str) -> None:
    """The person said `text` in their DM, and their memory keeps it (as an agent's write)."""
    assert app.sender.message(user, f"my locker code is {text}").status == 200
    app.wait_post(dm(user), "Handled 1 message.")
    with app.store._tx() as tx:
        change = MemoryChange(inbox(user), PATH, f"locker code {text}\n{SECOND}\nthird line")
        write_memory(tx, [change], int(time.time()), None)


def shown(app: Wakeful, user: str) -> list[dict[str, Any]]:
    """The ephemerals `user` sees in their DM, as they are now."""
    return app.emu.ephemerals(dm(user), user)


def wait_shown(app: Wakeful, user: str, found: Any, what: str) -> dict[str, Any]:
    """The first ephemeral `user` sees for which `found(e)` holds, once it shows."""
    ok = app.emu.wait_for(lambda _e: any(found(e) for e in shown(app, user)), 10)
    assert ok, f"{user} never saw {what}: {shown(app, user)}\n{app.tail()}"
    return next(e for e in shown(app, user) if found(e))


def ask_forget(app: Wakeful, user: str, key: str) -> dict[str, Any]:
    """`/wakeful forget`, and the prompt it shows (a new one: its message_ts unseen before)."""
    before = {e["message_ts"] for e in shown(app, user)}
    url = app.emu.response_url_for(key, user=user, channel=dm(user))
    assert app.sender.command(user, "forget", response_url=url).status == 200
    return wait_shown(
        app, user, lambda e: e["message_ts"] not in before and e["blocks"], "the forget prompt"
    )


def press(
    app: Wakeful, user: str, prompt: dict[str, Any], action: str, value: str, key: str
) -> int:
    """A button of `prompt` pressed by `user` (its value `value`): Slack's signed click, whose
    response_url rewrites that very prompt."""
    url = app.emu.response_url_for(
        key, user=user, channel=dm(user), original=str(prompt["message_ts"])
    )
    reply = app.sender.block_action(
        user, action, value, dm(user), str(prompt["message_ts"]), url, ephemeral=True
    )
    return reply.status


def test_memory_lists_and_only_a_pressed_forget_erases_every_trace(app: Wakeful) -> None:
    a, b, run = "U38A01", "U38B01", app.backend
    mark_a, mark_b = f"alpha{uuid.uuid4().hex}", f"bravo{uuid.uuid4().hex}"
    remember(app, a, mark_a)
    remember(app, b, mark_b)
    assert holders(app, mark_a) and holders(app, mark_b)  # the test can see them

    url = app.emu.response_url_for(f"memory-{run}", user=a, channel=dm(a))
    assert app.sender.command(a, "memory", response_url=url).status == 200
    listing = wait_shown(app, a, lambda e: PATH in e["text"], "the memory listing")
    assert f"locker code {mark_a}" in listing["text"]
    assert "tell &lt;!channel&gt; &amp; &lt;@U1&gt;" in listing["text"]  # shown, never acted on
    assert "<!channel>" not in listing["text"] and "<@U1>" not in listing["text"]
    assert "third line" not in listing["text"] and mark_b not in listing["text"]

    prompt = ask_forget(app, a, f"forget1-{run}")
    assert prompt["text"] == FORGET_QUESTION
    [actions] = [blk for blk in prompt["blocks"] if blk["type"] == "actions"]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert list(buttons) == [FORGET, FORGET_CANCEL] == ["memory_forget", "memory_forget_cancel"]
    assert buttons[FORGET]["style"] == "danger" and buttons[FORGET]["value"] == a
    assert buttons[FORGET_CANCEL]["value"] == a
    assert app.store.memory_read(inbox(a), PATH) is not None, "asking erased something"

    assert press(app, a, prompt, FORGET_CANCEL, a, f"cancel-{run}") == 200
    ts = prompt["message_ts"]
    wait_shown(app, a, lambda e: e["message_ts"] == ts and e["text"] == CANCELLED, CANCELLED)
    [cancelled] = [e for e in shown(app, a) if e["message_ts"] == ts]
    assert cancelled["blocks"] is None, "the prompt kept its buttons"
    settle(app, inbox(a))
    assert app.store.memory_read(inbox(a), PATH) == f"locker code {mark_a}\n{SECOND}\nthird line"
    assert app.store.forgets(inbox(a)) == [] and holders(app, mark_a)

    said = [e.id for e in app.store.events(inbox(a))]
    prompt = ask_forget(app, a, f"forget2-{run}")
    seen = len(shown(app, a))
    assert press(app, a, prompt, FORGET, a, f"pressed-{run}") == 200
    assert press(app, a, prompt, FORGET, a, f"pressed-again-{run}") == 200  # a double click
    ts = prompt["message_ts"]
    wait_shown(app, a, lambda e: e["message_ts"] == ts and e["text"] == FORGOTTEN, FORGOTTEN)
    [forgotten] = [e for e in shown(app, a) if e["message_ts"] == ts]
    assert (forgotten["text"], forgotten["blocks"]) == ("Forgotten.", None)  # buttons gone
    assert len(shown(app, a)) == seen, "Forgotten. came as a new message, not in place"
    answers = [e for e in app.store.events(inbox(a)) if e.source_id.startswith("forget:")]
    assert [e.source_id.rsplit(":", 1)[-1] for e in answers] == ["cancel", "forget"]

    assert eventually(lambda: holders(app, mark_a) == [], 20), holders(app, mark_a)
    assert holders(app, mark_b) != [], "the other person's words went too"
    assert app.store.memory_read(inbox(b), PATH) == f"locker code {mark_b}\n{SECOND}\nthird line"
    assert app.store.memory_docs(inbox(a)) == []
    kept = {e.id for e in app.store.events(inbox(a))}
    assert set(said) <= kept, "event rows went with their text"
    [line] = app.store.forgets(inbox(a))
    assert line["asked_by"] == a and mark_a not in str(line)


def test_a_forget_click_naming_someone_else_erases_nothing(app: Wakeful) -> None:
    c, d, run = "U38C01", "U38D01", app.backend
    mark = f"charlie{uuid.uuid4().hex}"
    remember(app, c, mark)
    prompt = ask_forget(app, c, f"forget-c-{run}")
    events = len(app.store.events(inbox(c)))
    # C's own click, its value forged to name another person; and D pressing a Forget that
    # names C (a prompt forwarded, a value rewritten): neither is an answer.
    assert press(app, c, prompt, FORGET, d, f"forged-{run}") == 200
    assert press(app, d, prompt, FORGET, c, f"other-{run}") == 200
    assert len(app.store.events(inbox(c))) == events
    assert app.store.events(inbox(d)) == []
    settle(app, inbox(c), inbox(d))
    assert app.store.memory_read(inbox(c), PATH) == f"locker code {mark}\n{SECOND}\nthird line"
    assert app.store.forgets(inbox(c)) == [] and holders(app, mark)
    [still] = [e for e in shown(app, c) if e["message_ts"] == prompt["message_ts"]]
    assert still["blocks"] and still["text"] == FORGET_QUESTION


def test_the_home_tab_says_how_to_see_and_erase_what_is_kept(app: Wakeful) -> None:
    user = "U38E01"
    assert app.sender.home_opened(user).status == 200
    ok = app.emu.wait_for(lambda e: bool(e.homes(user)), 10)
    assert ok, app.tail()
    [*_, last] = app.emu.homes(user)[-1]["blocks"]
    assert last == {"type": "context", "elements": [{"type": "mrkdwn", "text": MEMORY_LINE}]}
    assert MEMORY_LINE == (
        "`/wakeful memory` shows what I remember about you; `/wakeful forget` erases it."
    )
