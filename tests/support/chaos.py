"""A chaos run: the app, 3 workers, the scheduler and the dispatcher as separate OS processes
on one store, driven through the local Slack emulator, while a controller injects faults: by
default it SIGKILLs a random process every 0.2 to 1 s and restarts it (`sigkills`); other
fault plans (the database going away, tests/chaos/test_pg_outage.py) leave the processes to
recover on their own. Then every guarantee is checked against the store and against what Slack
(the emulator) received, and every process must still be running.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.forked_cli import Forked, shared
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events, overlapping_runs, runs
from wakeful.devtools.emulator import EventSender, SlackEmulator
from wakeful.devtools.fake_stripe import FakeStripe
from wakeful.devtools.webhooks import WebhookSender, github_payload, stripe_event

ROOT = Path(__file__).resolve().parents[2]
SECRET = "chaos-secret"
TOKEN = "xoxb-chaos"
POISON = "poison pill"
HOOKS = "C0HOOKS"
"""The conversation webhook deliveries report to in a chaos run."""
HOOK_SECRETS = {"github": "chaos-github", "stripe": "whsec_chaos", "ci": "chaos-ci"}


@dataclass
class Plan:
    events: int
    inboxes: int
    min_kills: int
    poison: int = 5
    seed: int = 7
    webhooks: int = 0
    """GitHub, Stripe and generic deliveries sent beside the Slack traffic, with retries."""
    fork: bool = True
    """Processes (and their restarts) forked from the test process's zygote, back in tens of
    milliseconds; False: each a new interpreter, as a deployment starts them. Forked restarts
    make the harsher run: the same events meet more kills. With them, before a retried event
    was run alone (core/worker.py `_run_retries`), the full stream chaos lost a chat message of
    2,000 to too many attempts in two of four store runs, and needed a fourth attempt (a kill
    spent an attempt of every event its worker had claimed, run or not); none since, with
    three (2026-12-05)."""


@dataclass
class Figures:
    events: int = 0
    kills: int = 0
    """Faults injected: SIGKILLs, or for other plans whatever each counts."""
    refused: int = 0
    """Deliveries the front answered with something other than 200 (Slack retried them)."""
    done: int = 0
    dead: int = 0
    poisoned: int = 0
    lost: int = 0
    duplicate_posts: int = 0
    overlapping_runs: int = 0
    double_answers: int = 0
    double_refunds: int = 0
    undelivered_rows: int = 0
    unexpected_dead: int = 0
    clicks: int = 0
    webhooks: int = 0
    webhook_repeats: int = 0
    webhook_refusals: int = 0
    """Attempts a webhook sender had to make again (app killed, connection dropped, 503)."""
    webhooks_lost: int = 0
    webhook_lines_missing: int = 0
    webhook_lines_doubled: int = 0
    gateway_kills: int = 0
    stripe_refunds: int = 0
    """Refunds the fake Stripe holds, made through the gateway (which is killed too)."""
    refunds_unconfirmed: int = 0
    confirmations_doubled: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def line(self, backend: str) -> str:
        return (
            f"chaos[{backend}]: events {self.events}  kills {self.kills}  done {self.done}  "
            f"dead {self.dead} (poisoned {self.poisoned})  lost {self.lost}  "
            f"duplicate posts {self.duplicate_posts}  overlapping runs {self.overlapping_runs}  "
            f"double answers {self.double_answers}  double refunds {self.double_refunds}  "
            f"undelivered {self.undelivered_rows}  clicks {self.clicks}  "
            f"webhooks {self.webhooks} (retried attempts {self.webhook_refusals}, "
            f"repeats after a 200 {self.webhook_repeats}, lost "
            f"{self.webhooks_lost}, lines missing {self.webhook_lines_missing}, doubled "
            f"{self.webhook_lines_doubled})  stripe refunds {self.stripe_refunds} (gateway "
            f"kills {self.gateway_kills}, unconfirmed "
            f"{self.refunds_unconfirmed}, confirmations doubled {self.confirmations_doubled})  "
            f"{self.seconds:.0f}s"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """The processes under test, each restartable."""

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        workdir: Path,
        gateway: tuple[Path, dict[str, str]] | None = None,
        fork: bool = True,
    ) -> None:
        self.env = env
        self.fork = fork
        self.own_env: dict[str, dict[str, str]] = {}
        self.port = port
        self.workdir = workdir
        wakeful = [sys.executable, "-m", "wakeful.bot.commands.cli", "--log-level", "WARNING"]
        self.commands = {
            "app": [*wakeful, "serve", "--no-loops", "--port", str(port), "--host", "127.0.0.1"],
            "worker-1": [*wakeful, "worker", "--poll", "0.2"],
            "worker-2": [*wakeful, "worker", "--poll", "0.2"],
            "worker-3": [*wakeful, "worker", "--poll", "0.2"],
            "scheduler": [*wakeful, "scheduler", "--poll", "0.2"],
            "dispatcher": [*wakeful, "dispatcher", "--poll", "0.2"],
        }
        if gateway is not None:  # the credential gateway, the one process with the Stripe key
            config, keys = gateway
            self.commands["gateway"] = [*wakeful, "gateway", "--config", str(config)]
            self.own_env["gateway"] = {**env, **keys}
        self.procs: dict[str, Forked | subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Any] = {}

    def start(self, name: str) -> None:
        log = self.logs.get(name)
        if log is None:
            log = self.logs[name] = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115
        env = self.own_env.get(name, self.env)
        if not self.fork:
            self.procs[name] = subprocess.Popen(
                self.commands[name], env=env, cwd=ROOT, stdout=log, stderr=log
            )
            return
        # Forked from this test process's zygote (tests/support/forked_cli.py): processes of
        # their own, killed as any is, without an interpreter's start for each of the dozens of
        # restarts a chaos run makes.
        with open(os.devnull, "rb") as null:
            self.procs[name] = shared(env).start(
                self.commands[name][3:],
                env=env,
                cwd=ROOT,
                stdin=null.fileno(),
                stdout=log.fileno(),
                stderr=log.fileno(),
            )

    def start_all(self) -> None:
        for name in self.commands:
            self.start(name)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self.logs.values():
            log.close()

    def log_tail(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""


def _deliver(
    sender: EventSender, deadline: float, send: Any, figures: Figures | None = None
) -> bool:
    """Send like Slack: retry (with X-Slack-Retry-Num) until a 200 or the deadline."""
    attempt = 0
    while time.monotonic() < deadline:
        try:
            reply = send(attempt)
            if reply.status == 200:
                return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if figures is not None:
            figures.refused += 1
        attempt += 1
        time.sleep(min(0.5, 0.05 * attempt))
    return False


Faults = Callable[[Fleet, random.Random, Figures, threading.Event], None]
"""A fault plan: runs in the controller thread until the event is set, counting in figures."""
Inspect = Callable[[SlackEmulator, list[str], set[str]], None]


def sigkills(
    fleet: Fleet,
    rng: random.Random,
    figures: Figures,
    stop: threading.Event,
    every: tuple[float, float] = (0.2, 1.0),
) -> None:
    """SIGKILL a random process every `every` (0.2 to 1 s) and start it again."""
    names = list(fleet.commands)
    while not stop.is_set():
        if stop.wait(rng.uniform(*every)):
            return
        name = rng.choice(names)
        fleet.kill(name)
        figures.kills += 1
        figures.gateway_kills += name == "gateway"
        fleet.start(name)


def run_chaos(
    plan: Plan,
    store: Store,
    db: str,
    workdir: Path,
    backend: str,
    faults: Faults = sigkills,
    settings: dict[str, str] | None = None,
    inspect: Inspect | None = None,
) -> Figures:
    """The run; `inspect` is handed Slack (the emulator), the acknowledged event ids and the
    poisoned ones once every process is stopped, for checks of its own."""
    rng = random.Random(plan.seed)
    figures = Figures()
    started = time.monotonic()
    emu = SlackEmulator(bot_token=TOKEN, bot_user_id="UBOT", team_id="TC")
    emu.start()
    port = free_port()
    stripe = FakeStripe(
        webhook_url=f"http://127.0.0.1:{port}", webhook_secret=HOOK_SECRETS["stripe"]
    )
    stripe.__enter__()
    gateway_port = free_port()
    gateway_config = workdir / "gateway.toml"
    gateway_config.write_text(
        f'listen = "127.0.0.1:{gateway_port}"\n'
        f'audit_log = "{workdir / "gateway-audit.jsonl"}"\n'
        "[destinations.stripe]\n"
        f'upstream = "{stripe.url}"\n'
        'allow = ["GET /v1/payment_intents/search", "POST /v1/refunds", "GET /v1/refunds"]\n'
        'secret_env = "STRIPE_SECRET_KEY"\n'
        "timeout = 5\nrate_limit = 1000\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": emu.api_url,
        "WAKEFUL_DB": db,
        "WAKEFUL_AGENT": "tests.support.chaos_agent:build",
        "WAKEFUL_LEASE_TTL": "3",
        "WAKEFUL_SEND_TIMEOUT": "3",
        "WAKEFUL_OUTBOX_GAP": "1",
        "WAKEFUL_APPROVAL_TTL": "8",
        "WAKEFUL_MAX_ATTEMPTS": "3",
        "WAKEFUL_BATCH_WINDOW": "0.1",
        "WAKEFUL_BACKOFF_BASE": "1",
        "WAKEFUL_BACKOFF_CAP": "4",
        "WAKEFUL_GITHUB_WEBHOOK_SECRET": HOOK_SECRETS["github"],
        "WAKEFUL_STRIPE_WEBHOOK_SECRET": HOOK_SECRETS["stripe"],
        "WAKEFUL_WEBHOOKS": f"ci={HOOK_SECRETS['ci']}",
        "WAKEFUL_WEBHOOK_CHANNEL": HOOKS,
        "WAKEFUL_REFUNDS": "stripe",
        "WAKEFUL_GATEWAY_URL": f"http://127.0.0.1:{gateway_port}",
        "WAKEFUL_GATEWAY_TOKEN": secrets.token_urlsafe(32),  # the workers' and the gateway's
        **(settings or {}),
    }
    env.pop("STRIPE_SECRET_KEY", None)
    keys = {"STRIPE_SECRET_KEY": stripe.api_key}
    fleet = Fleet(env, port, workdir, (gateway_config, keys), fork=plan.fork)
    fleet.start_all()
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET, team_id="TC")
    stop_kills = threading.Event()
    acknowledged: list[str] = []
    poison_ids: set[str] = set()
    ack_lock = threading.Lock()

    # -- the plan of messages ------------------------------------------------------------------
    messages: list[tuple[int, str]] = []
    for i in range(plan.events - plan.poison):
        u = i % plan.inboxes
        roll = rng.random()
        if roll < 0.12:
            text = f"please refund order {u}x{i}"
            stripe.add_payment(f"{u}x{i}")
        elif roll < 0.22:
            text = f"remind me in 1 seconds to stretch {i}"
        else:
            text = f"chat {i}"
        messages.append((u, text))
    for k in range(plan.poison):
        messages.insert(rng.randrange(len(messages)), (k % plan.inboxes, f"{POISON} {k}"))

    def controller() -> None:
        faults(fleet, rng, figures, stop_kills)

    # Spread the traffic over the kill period, so processes die while events are in flight.
    pause = plan.min_kills * 0.6 * 8 / max(1, len(messages))

    # Once one message goes unacknowledged through two minutes of retries (the front is gone,
    # say), the rest are not sent: the run ends in minutes with the reason, not in an hour.
    given_up: list[str] = []

    def driver(todo: list[tuple[int, int, str]]) -> None:
        for index, u, text in todo:
            if given_up:
                return
            time.sleep(pause)
            event_id = f"Ev{index:06d}"

            def send(attempt: int, u: int = u, text: str = text, eid: str = event_id) -> Any:
                return sender.message(
                    f"U{u}",
                    text,
                    channel=f"D{u}",
                    event_id=eid,
                    retry_num=attempt or None,
                    retry_reason="http_error" if attempt else None,
                )

            if _deliver(sender, time.monotonic() + 120, send, figures):
                with ack_lock:
                    acknowledged.append(event_id)
                    if POISON in text:
                        poison_ids.add(event_id)
            else:
                given_up.append(event_id)

    answered: set[str] = set()

    def clicker() -> None:
        # Only the posts made since its last look: re-parsing the blocks of every post each
        # 0.3 s cost the test process CPU in proportion to the run's length.
        seen = 0
        while not stop_clicks.is_set():
            posts = emu.calls("chat.postMessage")
            fresh, seen = posts[seen:], len(posts)
            for call in fresh:
                blocks = call.params.get("blocks")
                if isinstance(blocks, str):
                    blocks = json.loads(blocks)
                if not blocks or not call.response.get("ok"):
                    continue
                actions = [b for b in blocks if b.get("type") == "actions"]
                if not actions:
                    continue
                rid = actions[0]["elements"][0]["value"]
                if rid in answered:
                    continue
                answered.add(rid)
                owner = "U" + str(call.params.get("channel"))[1:]  # D7 is U7's DM
                roll = rng.random()
                if roll < 0.1:
                    continue  # nobody answers: it will expire
                action = "approve" if roll < 0.65 else "deny"
                ts = str(call.response.get("ts"))
                channel = str(call.params.get("channel"))
                if rng.random() < 0.2:  # a stranger taps first
                    _deliver(
                        sender,
                        time.monotonic() + 30,
                        lambda _a, r=rid, c=channel, t=ts: sender.block_action(
                            "USTRANGER", "approve", r, channel=c, message_ts=t
                        ),
                    )
                taps = 2 if rng.random() < 0.2 else 1  # an impatient double tap
                for _ in range(taps):
                    _deliver(
                        sender,
                        time.monotonic() + 30,
                        lambda _a, r=rid, c=channel, t=ts, a=action, o=owner: sender.block_action(
                            o, a, r, channel=c, message_ts=t
                        ),
                    )
                    figures.clicks += 1
            stop_clicks.wait(0.3)

    stop_clicks = threading.Event()
    kill_thread = threading.Thread(target=controller, daemon=True)
    click_thread = threading.Thread(target=clicker, daemon=True)
    time.sleep(1.5)  # let the first processes come up
    kill_thread.start()
    click_thread.start()
    numbered = [(i, u, text) for i, (u, text) in enumerate(messages)]
    drivers = [threading.Thread(target=driver, args=(numbered[i::8],)) for i in range(8)]
    # The webhook traffic spreads over the same span as the Slack drivers'.
    span = pause * len(messages) / 8
    hooks = Webhooks(
        port, plan.webhooks, random.Random(plan.seed + 1), span / max(1, plan.webhooks)
    )
    drivers.append(threading.Thread(target=hooks.drive, args=(figures,)))
    for t in drivers:
        t.start()
    for t in drivers:
        t.join()
    print(f"  delivered in {time.monotonic() - started:.1f}s, kills so far {figures.kills}")
    if given_up:
        figures.problems.append(
            f"{given_up[0]} was refused for 120 s of retries; {len(given_up)} message(s) given"
            " up, the rest not sent"
        )
    while figures.kills < plan.min_kills and not given_up:
        time.sleep(0.2)
    stop_kills.set()
    kill_thread.join()
    figures.events = len(acknowledged)

    # -- settle: no more kills; wait until everything has drained --------------------------------
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pending = count_events(store, "pending") + count_events(store, "running")
        open_rows = len(store.outbox("pending")) + len(store.outbox("sending"))
        timers_left = store.next_timer_at()
        if pending == 0 and open_rows == 0 and timers_left is None and stripe.quiet:
            break
        if os.environ.get("WAKEFUL_CHAOS_DEBUG"):
            print(
                f"  settle: pending {pending} rows {open_rows} next timer {timers_left} "
                f"now {int(time.time())}"
            )
        time.sleep(0.5)
    print(f"  settled at {time.monotonic() - started:.1f}s")
    stop_clicks.set()
    click_thread.join(10)
    time.sleep(1.0)
    for name, proc in fleet.procs.items():
        if proc.poll() is not None:
            figures.problems.append(f"{name} exited ({proc.returncode}): {fleet.log_tail(name)}")
    fleet.stop_all()
    figures.seconds = time.monotonic() - started

    # -- the checks ---------------------------------------------------------------------------
    stored = {}
    for status in ("pending", "running", "done", "dead"):
        figures_count = count_events(store, status)
        if status == "done":
            figures.done = figures_count
        elif status == "dead":
            figures.dead = figures_count
        elif figures_count:
            figures.problems.append(f"{figures_count} events still {status}")
    for eid in acknowledged:
        ev = store.event_by_key("slack", eid)
        if ev is None:
            figures.lost += 1
        else:
            stored[eid] = ev
    for eid, ev in stored.items():
        if ev.status == "dead":
            if eid in poison_ids:
                figures.poisoned += 1
            else:
                figures.unexpected_dead += 1
                print(f"  unexpected dead {eid} (event {ev.id}): {ev.error}")
        elif eid in poison_ids:
            figures.problems.append(f"poisoned event {eid} ended {ev.status}")
    part_ids = collections.Counter()
    for call in emu.calls("chat.postMessage"):
        if not call.response.get("ok"):
            continue
        meta = call.params.get("metadata")
        if isinstance(meta, str):
            meta = json.loads(meta)
        part = ((meta or {}).get("event_payload") or {}).get("part_id")
        if part:
            part_ids[part] += 1
    figures.duplicate_posts = sum(n - 1 for n in part_ids.values() if n > 1)
    posted = {p.split(":")[0] for p in part_ids}
    for row in store.outbox():
        if row.status != "sent" or (row.kind == "post" and row.dispatch_id not in posted):
            figures.undelivered_rows += 1
    figures.overlapping_runs = len(overlapping_runs(runs(store)))
    answers = collections.Counter(
        e.source_id
        for inbox in {f"TC:U{u}" for u in range(plan.inboxes)}
        for e in store.events(inbox)
        if e.source == "approval"
    )
    figures.double_answers = sum(n - 1 for n in answers.values() if n > 1)
    refunds = collections.Counter()
    for call in emu.calls("chat.postMessage"):
        text = str(call.params.get("text", ""))
        if call.response.get("ok") and text.startswith("Refunded order "):
            refunds[(call.params.get("channel"), text)] += 1
    figures.double_refunds = sum(n - 1 for n in refunds.values() if n > 1)
    keys = collections.Counter(r.key for r in store.recorded_steps(name="refund_order"))
    figures.double_refunds += sum(n - 1 for n in keys.values() if n > 1)
    check_stripe(stripe, emu, figures)
    stripe.__exit__(None, None, None)
    hooks.check(store, emu, figures)
    if inspect is not None:
        inspect(emu, acknowledged, poison_ids)
    emu.stop()
    return figures


def check_stripe(stripe: FakeStripe, emu: SlackEmulator, figures: Figures) -> None:
    """Stripe holds at most one refund per approved request and per payment, whichever process
    was killed when; each refund is confirmed once in its person's conversation."""
    refunds = list(stripe.refunds.values())
    figures.stripe_refunds = len(refunds)
    by_request = collections.Counter(r["metadata"].get("wakeful_request") for r in refunds)
    by_payment = collections.Counter(r["payment_intent"] for r in refunds)
    figures.double_refunds += sum(n - 1 for n in by_request.values() if n > 1)
    figures.double_refunds += sum(n - 1 for n in by_payment.values() if n > 1)
    confirmed: collections.Counter[str] = collections.Counter()
    for call in emu.calls("chat.postMessage"):
        text = str(call.params.get("text", ""))
        if call.response.get("ok"):
            confirmed.update(re.findall(r"Stripe confirmed the refund of order (\S+) \(", text))
    for r in refunds:
        order = r["metadata"].get("order_id")
        if confirmed[order] == 0:
            figures.refunds_unconfirmed += 1
        figures.confirmations_doubled += max(0, confirmed[order] - 1)


class Webhooks:
    """Webhook traffic for a chaos run: GitHub, Stripe and generic deliveries, each sent like
    the service sends it (again after a refused or dropped attempt, and sometimes once more
    after a 200, as GitHub's redelivery and Stripe's retries do). Each delivery's report line
    carries a token of its own, so Slack can be searched for it."""

    def __init__(self, port: int, count: int, rng: random.Random, pause: float) -> None:
        self.sender = WebhookSender(
            f"http://127.0.0.1:{port}",
            github_secret=HOOK_SECRETS["github"],
            stripe_secret=HOOK_SECRETS["stripe"],
            secrets={"ci": HOOK_SECRETS["ci"]},
            timeout=5,
        )
        self.count = count
        self.rng = rng
        self.pause = pause
        self.acknowledged: dict[str, tuple[str, str]] = {}
        """token -> (source, delivery id) of every delivery answered 200."""

    def drive(self, figures: Figures) -> None:
        issue = json.loads(github_payload("issues.opened"))
        for i in range(self.count):
            time.sleep(self.pause)
            token = f"chaos{i:05d}"
            if i % 3 == 0:
                body = json.loads(json.dumps(issue))
                body["issue"]["title"] = f"issue {token}"
                raw, delivery = json.dumps(body).encode(), str(uuid.uuid4())

                def send(raw: bytes = raw, delivery: str = delivery) -> Any:
                    return self.sender.github("issues", raw, delivery)

                key = ("github", delivery)
            elif i % 3 == 1:
                event = stripe_event("charge.succeeded")
                event["data"]["object"]["id"] = f"ch_{token}"

                def send(event: dict[str, Any] = event) -> Any:
                    return self.sender.stripe(event)

                key = ("stripe", event["id"])
            else:

                def send(token: str = token) -> Any:
                    return self.sender.generic("ci", b"{}", delivery=token)

                key = ("ci", token)
            if not self._deliver(send, figures):
                figures.problems.append(f"webhook {token} was refused for 120 s of retries")
                return  # the rest would wait as long: end the run with the reason
            self.acknowledged[token] = key
            figures.webhooks += 1
            if self.rng.random() < 0.3 and self._deliver(send, figures):
                figures.webhook_repeats += 1

    @staticmethod
    def _deliver(send: Any, figures: Figures, patience: float = 120) -> bool:
        deadline = time.monotonic() + patience
        attempt = 0
        while time.monotonic() < deadline:
            try:
                if send().status == 200:
                    return True
            except (OSError, http.client.HTTPException):
                pass
            figures.webhook_refusals += 1
            attempt += 1
            time.sleep(min(0.5, 0.05 * attempt))
        return False

    def check(self, store: Store, emu: SlackEmulator, figures: Figures) -> None:
        """0 lost (every 200 is stored), 0 duplicated (each line in Slack exactly once)."""
        lines: collections.Counter[str] = collections.Counter()
        for call in emu.calls("chat.postMessage"):
            if call.response.get("ok") and call.params.get("channel") == HOOKS:
                for token in re.findall(r"chaos\d{5}", str(call.params.get("text", ""))):
                    lines[token] += 1
        for token, (source, delivery) in self.acknowledged.items():
            if store.event_by_key(source, delivery) is None:
                figures.webhooks_lost += 1
            if lines[token] == 0:
                figures.webhook_lines_missing += 1
            figures.webhook_lines_doubled += max(0, lines[token] - 1)
