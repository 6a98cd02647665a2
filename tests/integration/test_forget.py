"""Issue 38, forgetting a person (core/privacy.py, core/store/forget.py), both stores: the
erasure reaches memory with every version, the saved conversation, recorded calls, timers and
the text of events and outbox rows (the rows stay); it is written by the fenced finish of the
run of the pressed Forget, or by `forget_inbox` whether or not a worker runs the inbox; and no
byte of the person's words is left in the store's files (SQLite's file and WAL, PostgreSQL's
pages, dead rows and free space included) while another person's stay."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from tests.support.raw_bytes import pg_tables_holding, sqlite_files_holding
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Timer
from wakeful.core.events import Command, ForgetAnswer, Message
from wakeful.core.inbox_id import InboxId
from wakeful.core.privacy_text import CANCELLED, FORGOTTEN, NOTHING_KEPT
from wakeful.core.run import Run
from wakeful.core.runner import runner_for
from wakeful.core.store import Store
from wakeful.core.store.forget import ERASED
from wakeful.core.worker import Worker

A, B = InboxId.person("T1", "UA"), InboxId.person("T1", "UB")


class Remembering:
    """Keeps what each person says everywhere it can: a reply quoting it, a memory document,
    the saved conversation, a reminder's text, a recorded step."""

    def run(self, run: Run) -> None:
        for e in run.events:
            if not isinstance(e, Message):
                continue
            run.reply(f"You said: {e.text}", to=e)
            run.memory.write("/memories/said.md", e.text)
            run.memory.write("/memories/said.md", f"{e.text} (again)")  # one version
            run.save({"history": [e.text]})
            run.set_timer(Timer.once(f"remind-{e.id}", T0 + 3600, {"text": e.text}), to=e)
            run.step(f"note:{e.id}", lambda _key, text=e.text: {"noted": text}, cause=e)


def said(store: Store, inbox: str, user: str, text: str, n: int) -> None:
    event = Message(text=text, user=user, team="T1", channel=f"D{user}", ts=f"{T0}.{n:06d}")
    assert store.ingest(inbox, "slack", f"Ev{user}{n}", event.to_wire(), T0).event_id


def tick(store: Store, agent: Any = None) -> None:
    runner = runner_for(agent or Remembering(), store)
    Worker(store=store, clock=ManualClock(T0), runner=runner).tick(T0)


def raw_holders(store: Store, marker: str) -> list[str]:
    if store.db.dialect == "sqlite":
        return sqlite_files_holding(store.db.path, marker)  # type: ignore[attr-defined]
    dsn = os.environ["WAKEFUL_TEST_PG_DSN"]
    return pg_tables_holding(dsn, store.db.schema, marker)  # type: ignore[attr-defined]


def two_people(store: Store) -> tuple[str, str]:
    """A and B each said something with a marker of their own, and it was kept everywhere."""
    mark_a, mark_b = f"alpha-{uuid.uuid4().hex}", f"bravo-{uuid.uuid4().hex}"
    said(store, A, "UA", f"my locker code is {mark_a}", 1)
    said(store, B, "UB", f"my locker code is {mark_b}", 2)
    tick(store)
    assert store.memory_read(A, "/memories/said.md") == f"my locker code is {mark_a} (again)"
    assert raw_holders(store, mark_a) and raw_holders(store, mark_b)  # the test can see it
    return mark_a, mark_b


def assert_forgotten(store: Store, mark_a: str, mark_b: str) -> None:
    assert raw_holders(store, mark_a) == []
    assert raw_holders(store, mark_b) != []
    assert store.memory_docs(A) == [] and store.memory_versions(A, "/memories/said.md") == []
    assert store.memory_read(B, "/memories/said.md") == f"my locker code is {mark_b} (again)"
    exported = store.export_inbox(A)
    assert exported["conversation"] is None and exported["timers"] == []
    erased = json.loads(ERASED)
    assert exported["events"] and all(e["payload"] == erased for e in exported["events"])
    assert all(mark_a not in json.dumps(row) for row in exported["outbox"])
    assert mark_b in json.dumps(store.export_inbox(B))


def test_forget_from_the_command_line_erases_every_trace_and_leaves_the_others(
    make_store: MakeStore,
) -> None:
    store = make_store()
    mark_a, mark_b = two_people(store)
    events_before = len(store.export_inbox(A)["events"])
    done = store.forget_inbox(A, "cli", T0 + 10)
    assert (done.documents, done.versions, done.events, done.scrubbed) == (1, 1, 1, True)
    assert done.outbox >= 1
    assert len(store.export_inbox(A)["events"]) == events_before  # the rows stay
    assert_forgotten(store, mark_a, mark_b)
    [line] = store.forgets(A)
    assert (line["asked_by"], line["documents"], line["events"]) == ("cli", 1, 1)
    assert mark_a not in json.dumps(line)


def test_pressing_forget_erases_in_the_runs_finish_and_the_prompt_says_forgotten(
    make_store: MakeStore,
) -> None:
    store = make_store()
    mark_a, mark_b = two_people(store)
    url = "https://hooks.slack.com/actions/T1/1/forgetA"
    answer = ForgetAnswer(user="UA", team="T1", channel="DUA", answer="forget", response_url=url)
    later = Message(text=f"and {mark_a} again", user="UA", team="T1", channel="DUA", ts="9.1")
    assert store.ingest(A, "slack", "forget:1", answer.to_wire(), T0 + 5).event_id
    assert store.ingest(A, "slack", "EvUA9", later.to_wire(), T0 + 5).event_id
    tick(store)
    rows = store.export_inbox(A)["outbox"]
    assert [r["text"] for r in rows if r["text"]] == [FORGOTTEN]  # the only words left
    assert_forgotten(store, mark_a, mark_b)
    [line] = store.forgets(A)
    assert line["asked_by"] == "UA"


def test_memory_and_forget_commands_are_answered_by_the_engine_and_erase_nothing(
    make_store: MakeStore,
) -> None:
    store = make_store()
    mark_a, _ = two_people(store)

    def command(text: str, n: int) -> None:
        c = Command(command="/wakeful", text=text, user="UA", team="T1", channel="DUA")
        assert store.ingest(A, "slack", f"cmd{n}", c.to_wire(), T0 + n).event_id

    ran: list[int] = []

    class Counting(Remembering):
        def run(self, run: Run) -> None:
            ran.append(len(run.events))

    command("memory", 1)
    command(" Forget ", 2)
    tick(store, Counting())
    cancel = ForgetAnswer(user="UA", team="T1", channel="DUA", answer="cancel")
    assert store.ingest(A, "slack", "forget:cancel", cancel.to_wire(), T0 + 3).event_id
    tick(store, Counting())
    assert ran == []  # the agent never saw them
    texts = [r["text"] for r in store.export_inbox(A)["outbox"]][-3:]
    assert "/memories/said.md" in texts[0] and mark_a in texts[0]  # path and first lines
    assert texts[1].startswith("Forget what I keep about you?")
    assert texts[2] == CANCELLED
    assert store.memory_docs(A) != [] and store.forgets(A) == []
    store.forget_inbox(A, "cli", T0 + 9)
    command("memory", 4)
    tick(store, Counting())
    assert store.export_inbox(A)["outbox"][-1]["text"].startswith(NOTHING_KEPT)


def test_a_run_in_progress_when_the_command_line_forgets_is_fenced(make_store: MakeStore) -> None:
    """`wakeful forget` while serve runs the inbox: the run's finish writes nothing back."""
    store = make_store()
    said(store, A, "UA", "remember the blue door", 1)
    forgot: list[object] = []

    class ForgottenMidRun(Remembering):
        def run(self, run: Run) -> None:
            forgot.append(store.forget_inbox(A, "cli", T0))  # another process, mid-run
            super().run(run)

    tick(store, ForgottenMidRun())
    assert forgot and store.memory_docs(A) == []
    assert store.export_inbox(A)["conversation"] is None
    assert all("blue door" not in json.dumps(r) for r in store.export_inbox(A)["outbox"])
    assert raw_holders(store, "remember the blue door") == []


@pytest.mark.parametrize("answer", ["forget", "cancel"])
def test_a_forget_answer_decodes_and_a_bad_one_is_unknown(answer: str) -> None:
    from wakeful.core.events import Unknown, decode

    good = ForgetAnswer(user="U", team="T", channel="D", answer=answer)  # type: ignore[arg-type]
    assert decode(good.to_wire()) == good
    assert isinstance(decode({**good.to_wire(), "answer": "maybe"}), Unknown)
