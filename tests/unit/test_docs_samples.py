"""The README and docs/ cannot drift from what the commands print: every marked sample of
command output (`<!-- sample: NAME -->`, see tests/support/doc_samples.py) is run again here,
as a reader would run it, against a store a real `wakeful serve` filled from the Slack
emulator, and compared with the page (times, ids and sizes normalised).

The session behind the samples: U042 says hello, then asks for a refund (an approval stays
open); U077 sets a reminder in a DM Slack no longer knows (the reply is parked with
`channel_not_found`); the token was granted every scope but `users:read`. The samples show a
SQLite store: backup and restore are SQLite's (PostgreSQL points to pg_dump).

A sample named `... (a store with every kind of row)` runs instead against the store
tests/support/full_store.py fills (dead events, parked and paused posts, approved calls
waiting, given up and failed), which no short Slack session makes; one named `... (a person
the agent remembers)` against a store of its own where U042 told an agent that keeps memory
two things and U077 one (tests/integration/test_forget_cli.py's `keep`): the session's agent
keeps none, and a forget must not change what the other samples show."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.test_forget_cli import keep
from tests.support import full_store
from tests.support.doc_samples import PAGES, ROOT, Sample, check, normalise, samples
from tests.support.slack_app import (
    SECRET,
    Wakeful,
    child_env,
    dm,
    eventually,
    launch,
    shut_down,
    wakeful_cmd,
)
from wakeful.bot.slack.scopes import required_scopes
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import SlackEmulator

FULL_STORE = "(a store with every kind of row)"
"""How a sample's name ends when it runs against tests/support/full_store.py's store."""
REMEMBERED = "(a person the agent remembers)"
"""How a sample's name ends when it runs against a store of its own where people told an
agent that keeps memory things (`remembered_folder`)."""
SAMPLES = samples()
SESSION_SAMPLES = [s for s in SAMPLES if not s.name.endswith((FULL_STORE, REMEMBERED))]
FULL_SAMPLES = [s for s in SAMPLES if s.name.endswith(FULL_STORE)]
REMEMBERED_SAMPLES = [s for s in SAMPLES if s.name.endswith(REMEMBERED)]
STORE = "wakeful.db"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Wakeful, Path]]:
    """A real `wakeful serve` on `wakeful.db` in a folder of its own, after the session."""
    here = tmp_path_factory.mktemp("samples")
    shutil.copy(ROOT / "manifest.yml", here / "manifest.yml")  # what doctor compares against
    granted = [s for s in required_scopes() or [] if s != "users:read"]
    with SlackEmulator(bot_token="xoxb-samples", scopes=granted) as emu:
        app = launch(here, emu, str(here / STORE), {"WAKEFUL_BATCH_WINDOW": "0"})
        try:
            app.sender.message("U042", "hello")
            app.wait_post(dm("U042"), "Handled 1 message.")
            app.sender.message("U042", "please refund order 1234")
            app.wait_post(dm("U042"), "refund order 1234")
            emu.remove_channel(dm("U077"))
            app.sender.message("U077", "remind me in 10 minutes to stretch")
            assert eventually(lambda: len(app.store.dead_letters().outbox) == 1), app.tail()
            assert eventually(lambda: settled(app)), app.tail()
            yield app, here
        finally:
            if app.proc.popen.poll() is None:
                shut_down(app)


def settled(app: Wakeful) -> bool:
    """Every reply sent or parked, every event done: what the samples show is at rest."""
    rows = app.store.outbox()
    return all(o.status in ("sent", "failed") for o in rows) and not count_events(
        app.store, "pending"
    )


@pytest.fixture(scope="module")
def full_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `wakeful.db` with every kind of row (tests/support/full_store.py)."""
    here = tmp_path_factory.mktemp("full-store")
    full_store.fill(str(here / STORE), int(time.time()))
    return here


@pytest.fixture
def remembered_folder(tmp_path: Path) -> Path:
    """A folder holding `wakeful.db` where U042 said two things and U077 one, a minute ago,
    to an agent that keeps them in memory: a store of its own for each sample (one forgets)."""
    keep(
        str(tmp_path / STORE),
        int(time.time()) - 60,
        [
            ("U042", "my locker code is 4417"),
            ("U077", "I take my tea black"),
            ("U042", "call me Sam"),
        ],
    )
    return tmp_path


def run(here: Path, app: Wakeful, command: str) -> str:
    """One `$ wakeful ...` line as a reader types it in the store's folder: what it prints."""
    env = child_env(
        WAKEFUL_DB=STORE,
        SLACK_BOT_TOKEN=app.emu.bot_token,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=app.emu.api_url,
    )
    return run_in(here, command, env)


def run_in(here: Path, command: str, env: Mapping[str, str]) -> str:
    """`command` run in `here` with `env`: what it printed, paths relative to `here`."""
    words = command.split()
    assert words[0] == "wakeful", f"a sample runs wakeful, not {command!r}"
    done = subprocess.run(
        wakeful_cmd(*words[1:]),
        cwd=here,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    return done.stdout.replace(f"{here}/", "")  # the reader's folder: paths relative to it


def steps_for(app: Wakeful) -> dict[str, Callable[[], None]]:
    """What the `$ # ...` lines of the samples ask the reader to do."""
    return {"# ... stop serve ...": lambda: shut_down(app)}


def stops(sample: Sample) -> bool:
    return any(cmd.startswith("#") for cmd, _ in sample.steps())


def test_there_are_samples_and_each_is_named_once() -> None:
    names = [s.name for s in SAMPLES]
    assert len(names) == len(set(names)), names
    assert {"wakeful inspect", "wakeful doctor", "wakeful backup and restore"} <= set(names)
    assert FULL_SAMPLES, f"no sample runs against the full store (named '... {FULL_STORE}')"
    assert len(REMEMBERED_SAMPLES) >= 2, f"inspect --memory, export and forget ('{REMEMBERED}')"


# The samples that stop the server run last, on the same session.
@pytest.mark.parametrize("sample", sorted(SESSION_SAMPLES, key=stops), ids=lambda s: s.name)
def test_each_sample_is_what_the_command_prints(
    sample: Sample, session: tuple[Wakeful, Path]
) -> None:
    app, here = session
    actions = steps_for(app)
    fresh = []
    for command, _ in sample.steps():
        if command.startswith("#"):
            assert command in actions, f"no action for the step {command!r} of {sample.name!r}"
            actions[command]()
            fresh.append((command, ""))
        else:
            fresh.append((command, run(here, app, command)))
    check(sample, fresh)


@pytest.mark.parametrize("sample", FULL_SAMPLES, ids=lambda s: s.name)
def test_each_full_store_sample_is_what_the_command_prints(
    sample: Sample, full_folder: Path
) -> None:
    env = child_env(WAKEFUL_DB=STORE)
    check(sample, [(cmd, run_in(full_folder, cmd, env)) for cmd, _ in sample.steps()])


@pytest.mark.parametrize("sample", REMEMBERED_SAMPLES, ids=lambda s: s.name)
def test_each_remembered_sample_is_what_the_command_prints(
    sample: Sample, remembered_folder: Path
) -> None:
    env = child_env(WAKEFUL_DB=STORE)
    check(sample, [(cmd, run_in(remembered_folder, cmd, env)) for cmd, _ in sample.steps()])


def test_the_normalising_keeps_what_matters() -> None:
    """Two runs differ in times and ids, never in counts, states or words."""
    a = "  4   T1:U077  D077     1         4s ago   channel_not_found"
    b = "  4   T1:U077  D077  1  12s ago  channel_not_found"
    assert normalise(a) == normalise(b)
    assert normalise(a) != normalise(a.replace("channel_not_found", "not_in_channel"))
    assert normalise("events: 0 pending") != normalise("events: 1 pending")
    assert normalise("schema 6, current") != normalise("schema 12, current")
    assert all(p.exists() for p in PAGES)
