"""`wakeful dev`: your agent in a chat in the terminal, against the local Slack emulator.

One command starts the emulator, `serve`'s HTTP front (in this process) and its worker,
scheduler and dispatcher with your agent (a child process, `devtools/dev_loops.py`), on a
SQLite file in a temporary folder; with the refund desk (or `--stripe`), a fake Stripe behind
the credential gateway. You type as a person; every line the bot sends comes back as it is
sent. Nothing leaves the machine and no Slack account is needed.

The line protocol (stdin in, stdout out) is what tests drive; `/help` lists the commands.
`/crash` kills the worker process with SIGKILL (mid-run, if it was running) and starts a new
one: what was stored survives because it is in the store, not because the old worker was
allowed to finish. `/advance` moves one clock that every part reads (a file the worker reads
too), so timers and approval expiries fire as they would that much later."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from slack_sdk.signature import Clock as SlackClock

from wakeful.bot.process.config import Config, ConfigError
from wakeful.devtools.client import AppRefused, Button, Slack
from wakeful.devtools.dev_chat import Chat, People
from wakeful.devtools.local import ShiftedClock, start_gateway

SECRET = "dev-signing-secret"
TOKEN = "xoxb-dev"
TEAM = "T0DEV"
OPS = "C0OPS"
GITHUB_SECRET, HOOKS_SECRET = "dev-github-secret", "dev-hooks-secret"
STRIPE_SECRET = "whsec_dev"
NAME = re.compile(r"^[a-z][a-z0-9]{0,20}$")
DURATION = re.compile(r"^(\d{1,6})\s*([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
READY_TIMEOUT = 60.0
HELP = """\
[dev] type a message to send it as the current person; commands:
[dev]   /as NAME              be NAME (alice at first); your DM is the default place
[dev]   /in #CHANNEL | /in dm  talk in a channel (each message mentions the bot) or the DM
[dev]   /thread [off]         reply in the thread of your last message here (off: leave it)
[dev]   /command TEXT         the slash command `/wakeful TEXT`
[dev]   /press N              press button N; /approve [N] and /deny [N] press the Approve
[dev]                         or Deny button of button N's message (default: the latest)
[dev]   /advance 90s|5m|1h|2d move time forward: timers and approval expiries fire
[dev]   /webhook github EVENT FILE | /webhook stripe FILE | /webhook hooks FILE
[dev]   /crash                kill the worker (SIGKILL) and start a new one
[dev]   /reload               restart the worker gracefully: your code is loaded again
[dev]   /inspect [INBOX]      what `wakeful inspect` shows
[dev]   /quit                 stop (end of input too)"""


class DevFailed(Exception):
    pass


class VerifierClock(SlackClock):
    """Slack's five minutes judged on the session's time, as the requests are stamped."""

    def __init__(self, clock: ShiftedClock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock.seconds()


class Dev:
    """One session: the parts, the person typing, the place they type in."""

    def __init__(
        self, agent: str, out: Callable[[str], None], stripe: bool, db: str | None
    ) -> None:
        from wakeful.devtools.emulator import SlackEmulator

        self.agent = agent
        self.people = People()
        self.chat = Chat(self.people, out)
        self.emu = SlackEmulator(bot_token=TOKEN, bot_user_id="UBOT", team_id=TEAM)
        self.emu.on_call = self.chat.on_call
        self.stripe_on = stripe
        self.db = db
        self.person = ""
        self.channel = ""  # "" is the person's DM
        self.thread: str | None = None
        self.last_sent: dict[tuple[str, str], str] = {}
        self.worker: subprocess.Popen[str] | None = None

    def say(self, text: str) -> None:
        self.chat.line(f"[dev] {text}")

    # -- the parts --------------------------------------------------------------------------

    def env(self, folder: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SLACK_BOT_TOKEN=TOKEN,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=self.emu.api_url,
            WAKEFUL_DB=self.db or str(folder / "dev.db"),
            WAKEFUL_AGENT=self.agent,
            WAKEFUL_GITHUB_WEBHOOK_SECRET=GITHUB_SECRET,
            WAKEFUL_WEBHOOKS=f"hooks={HOOKS_SECRET}",
            WAKEFUL_STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,
            WAKEFUL_WEBHOOK_CHANNEL=OPS,
        )
        for name in (
            "WAKEFUL_GATEWAY_CONFIG",
            "SLACK_APP_TOKEN",
            "SLACK_CLIENT_ID",
            "SLACK_CLIENT_SECRET",
        ):
            env.pop(name, None)  # dev serves HTTP on loopback, one workspace, its own gateway
        return env

    def run(self, lines: Iterator[str]) -> int:
        """Start every part, take `lines` one by one, then stop the parts the other way."""
        from wakeful.devtools.demo import logs_to

        with contextlib.ExitStack() as stack:
            self.folder = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="wakeful-dev-"))
            )
            stack.enter_context(self.emu)
            stack.enter_context(logs_to(self.folder / "dev.log"))
            self.start(stack)
            self.become("alice")
            for line in lines:
                if not self.handle(line.strip()):
                    break
        return 0

    def start(self, stack: contextlib.ExitStack) -> None:
        """The store, the gateway and fake Stripe (when used), the HTTP front, the worker."""
        from wakeful.bot.front.listeners import Listeners
        from wakeful.bot.front.wsgi import SlackFront
        from wakeful.bot.process.runtime import http_server, open_configured_store, serve_in_thread
        from wakeful.core.loops import Wakeup
        from wakeful.devtools.fake_stripe import FakeStripe

        self.environ = self.env(self.folder)
        config = Config.from_env(self.environ, need={"token", "secret", "agent"})
        self.clock = ShiftedClock(self.folder / "clock")
        store = self.store = open_configured_store(config)
        stack.callback(store.close)
        stripe = None
        if self.stripe_on:
            stripe = stack.enter_context(FakeStripe(webhook_secret=STRIPE_SECRET))
            for order, amount in (("1001", 4200), ("1002", 1500), ("1003", 990)):
                stripe.add_payment(order, amount=amount)
            worker_env, stop_gateway = start_gateway(self.folder, stripe, store)
            stack.callback(stop_gateway)
            self.environ.update(worker_env)
        listeners = Listeners(
            store,
            SECRET,
            "UBOT",
            "BBOT",
            Wakeup(),  # the worker is another process: it polls the store
            Wakeup(),
            self.clock,
            approvers=config.approvers,
        )
        front = SlackFront(
            listeners,
            webhook_sources=config.webhooks,
            verifier_clock=VerifierClock(self.clock),
        )
        server = http_server(front, "127.0.0.1", 0)
        stack.callback(serve_in_thread(server))
        base = f"http://127.0.0.1:{server.effective_port}"
        if stripe is not None:
            stripe.webhook_url = base
        self.slack = Slack(
            base,
            SECRET,
            self.emu,
            team_id=TEAM,
            github_secret=GITHUB_SECRET,
            stripe_secret=STRIPE_SECRET,
            webhook_secrets={"hooks": HOOKS_SECRET},
            clock=self.clock.seconds,
        )
        stack.callback(self.stop_worker)
        self.start_worker()
        self.say(f"agent {self.agent}, app at {base}, store {config.db}")
        self.say(f"Slack is the emulator at {self.emu.api_url}; /help lists the commands")

    def start_worker(self) -> None:
        """The worker process; back once its loops run (it says `ready`)."""
        log = open(self.folder / "worker.log", "ab")  # noqa: SIM115 (the child holds it)
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "wakeful.devtools.dev_loops", str(self.clock.path)],
            env=self.environ,
            stdin=subprocess.PIPE,  # its end of input is our end (devtools/dev_loops.py)
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        stdout = self.worker.stdout
        assert stdout is not None
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT)
        if not got or got[0].strip() != "ready":
            self.stop_worker(signal.SIGKILL)
            log_path = self.folder / "worker.log"
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise DevFailed(f"the worker did not start: {tail[0].strip()} (its log: {log_path})")

    def stop_worker(self, sig: int = signal.SIGTERM) -> None:
        worker, self.worker = self.worker, None
        if worker is None:
            return
        worker.send_signal(sig)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()

    # -- the commands -----------------------------------------------------------------------

    def handle(self, line: str) -> bool:
        """One typed line; False to stop."""
        if not line:
            return True
        try:
            if not line.startswith("/"):
                self.send(line)
                return True
            word, _, rest = line.partition(" ")
            rest = rest.strip()
            if word in ("/quit", "/exit"):
                return False
            command = COMMANDS.get(word)
            if command is None:
                self.say(f"unknown command {word} (/help lists them)")
            else:
                command(self, rest)
        except DevFailed as exc:  # /reload of code that does not load: fix it, /reload again
            self.say(f"error: {exc}")
            self.say("no worker runs now: what you send is stored; /reload to start one")
        except (AppRefused, KeyError, ValueError, OSError, TimeoutError) as exc:
            self.say(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}")
        return True

    def become(self, name: str) -> None:
        if not NAME.match(name):
            raise ValueError(f"a name is lowercase letters and digits, got {name!r}")
        self.people.add(name)
        self.emu.add_user(self.people.user(name), name=name, tz="UTC")
        self.person, self.channel, self.thread = name, "", None
        self.chat.here = self.people.dm(name)
        self.say(f"you are {name} ({self.people.user(name)}), in your DM with the bot")

    def place(self) -> str:
        return self.channel or self.people.dm(self.person)

    def send(self, text: str) -> None:
        user = self.people.user(self.person)
        if self.thread is not None:
            if self.channel:
                self.slack.say(user, text, self.channel, thread=self.thread)
            else:
                self.slack.dm(user, text, thread=self.thread)
            return
        if self.channel:
            ts = self.slack.mention(user, text, self.channel)
        else:
            ts = self.slack.dm(user, text)
        self.last_sent[self.person, self.place()] = ts

    def go(self, rest: str) -> None:
        if rest == "dm":
            self.channel, self.thread = "", None
            self.say("in your DM")
            return
        name = rest.removeprefix("#")
        if not rest.startswith("#") or not NAME.match(name):
            raise ValueError("say /in #channel (lowercase letters and digits) or /in dm")
        self.channel, self.thread = self.people.channel(name), None
        self.say(f"in #{name}: each message mentions the bot")

    def in_thread(self, rest: str) -> None:
        if rest == "off":
            self.thread = None
            self.say("out of the thread")
            return
        ts = self.last_sent.get((self.person, self.place()))
        if ts is None:
            raise ValueError("nothing to thread under: send a message here first")
        self.thread = ts
        self.say("in the thread of your last message here")

    def command(self, rest: str) -> None:
        user = self.people.user(self.person)
        url = self.emu.response_url_for(f"dev-{time.monotonic_ns()}")
        reply = self.slack.command(user, rest, self.channel or None, response_url=url)
        body = reply.body.strip()
        try:
            answer = json.loads(body) if body else None
        except ValueError:
            answer = body
        if isinstance(answer, dict):
            answer = answer.get("text")
        if answer:
            self.chat.line(f"[bot, answering the command] {self.people.plain(str(answer))}")

    def press(self, rest: str) -> None:
        n = int(rest) if rest.isdigit() else None
        if n is None or n not in self.chat.buttons:
            raise ValueError(f"there is no button {rest!r}")
        self.click(self.chat.buttons[n])

    def answer(self, word: str, rest: str) -> None:
        if rest and not rest.isdigit():
            raise ValueError(f"/{word} takes a button number, got {rest!r}")
        self.click(self.chat.sibling(int(rest) if rest else None, word))

    def click(self, button: Button) -> None:
        self.say(f"{self.person} presses [{button.label}]")
        self.slack.click(self.people.user(self.person), button)

    def advance(self, rest: str) -> None:
        m = DURATION.match(rest)
        if m is None:
            raise ValueError(f"say how long: 90s, 5m, 1h or 2d, got {rest!r}")
        self.clock.advance(int(m.group(1)) * UNITS[m.group(2)])
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.clock()))
        self.say(f"time moved {m.group(1)}{m.group(2)} forward: it is now {now} UTC")

    def webhook(self, rest: str) -> None:
        words = rest.split()
        if words[:1] == ["github"] and len(words) == 3:
            sent = self.slack.github(words[1], Path(words[2]).read_bytes())
        elif words[:1] == ["stripe"] and len(words) == 2:
            sent = self.slack.stripe(json.loads(Path(words[1]).read_text()))
        elif len(words) == 2 and words[0] not in ("github", "stripe"):
            sent = self.slack.webhook(words[0], Path(words[1]).read_bytes())
        else:
            raise ValueError(
                "say /webhook github EVENT FILE, /webhook stripe FILE or /webhook hooks FILE"
            )
        self.say(f"webhook {' '.join(words[:-1])}: HTTP {sent.status} {sent.text.strip()}")

    def crash(self, _rest: str) -> None:
        pid = self.worker.pid if self.worker else "?"
        self.stop_worker(signal.SIGKILL)
        self.say(f"worker {pid} killed (SIGKILL); starting a new one")
        self.start_worker()
        self.say(f"worker {self.worker.pid if self.worker else '?'} running")

    def reload(self, _rest: str) -> None:
        self.stop_worker(signal.SIGTERM)
        self.start_worker()
        self.say(
            f"worker {self.worker.pid if self.worker else '?'} running with the code as it is now"
        )

    def inspect(self, rest: str) -> None:
        from wakeful.bot.commands.inspection import header_line, render_inbox, render_overview

        now = self.clock()
        head = header_line(self.environ["WAKEFUL_DB"], self.store, now)
        if rest:
            text = render_inbox(self.store.inbox_view(rest, now, limit=20), head)
        else:
            text = render_overview(self.store.overview(now, limit=20), head)
        for line in text.splitlines():
            self.chat.line(line)

    def help(self, _rest: str) -> None:
        self.chat.line(HELP)


COMMANDS: dict[str, Callable[[Dev, str], None]] = {
    "/as": lambda dev, rest: dev.become(rest),
    "/in": Dev.go,
    "/thread": Dev.in_thread,
    "/command": Dev.command,
    "/press": Dev.press,
    "/approve": lambda dev, rest: dev.answer("approve", rest),
    "/deny": lambda dev, rest: dev.answer("deny", rest),
    "/advance": Dev.advance,
    "/webhook": Dev.webhook,
    "/crash": Dev.crash,
    "/reload": Dev.reload,
    "/inspect": Dev.inspect,
    "/help": Dev.help,
}


def typed_lines() -> Iterator[str]:
    """stdin's lines: with a prompt at a terminal, as they come from a pipe."""
    while True:
        try:
            line = input("> ") if sys.stdin.isatty() else sys.stdin.readline()
        except EOFError:
            return
        if not line and not sys.stdin.isatty():
            return
        yield line


def run_dev(agent: str | None, stripe: bool = False, db: str | None = None) -> int:
    spec = (agent or os.environ.get("WAKEFUL_AGENT", "") or "refund-desk").strip()
    from wakeful.bot.process.loading import load_factory

    if db is not None and "://" in db:
        raise ConfigError("wakeful dev keeps its store in a SQLite file: --db takes a path")
    load_factory(spec)  # a bad --agent is said here, in one line, before anything starts
    uses_stripe = stripe or spec in ("refund-desk", "wakeful.bot.builtin.refund_desk:factory")

    def out(text: str) -> None:
        print(text, flush=True)

    try:
        return Dev(spec, out, uses_stripe, db).run(typed_lines())
    except DevFailed as exc:
        print(f"wakeful dev: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C at the prompt: everything above was stopped
        return 0
