"""`wakeful demo`: the whole app against the local Slack emulator, narrated.

Nothing leaves the machine: the emulator plays Slack's Web API, a signed-request client plays
Slack delivering events and clicks, a fake Stripe API (devtools/fake_stripe.py) plays Stripe
behind the credential gateway and sends its signed webhooks back, and the app runs exactly as
`wakeful serve` does (the same HTTP front, loops, agent and dispatcher) on a temporary SQLite
file, with a short gap and short approval window so the session fits in well under a minute.
Every expectation is checked; the demo exits 1 if Slack did not see what the narration says.
The narration is all it prints: the app's log lines go to a file beside the temporary store
(its last lines are shown if the demo fails), or to stderr with `--verbose`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wakeful.bot.builtin.refund_desk import HELP_LINES
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.bot.process.config import Config, WebhookSource
from wakeful.bot.process.runtime import Runtime, http_server, serve_in_thread
from wakeful.bot.slack.home import as_text
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core.settings import Settings
from wakeful.core.store import open_store
from wakeful.devtools.demo_narrator import DM, OPS, ROOM, Narrator, indent
from wakeful.devtools.emulator import EventSender, SlackEmulator
from wakeful.devtools.emulator.streams import streamed_text
from wakeful.devtools.fake_stripe import FakeStripe
from wakeful.devtools.local import start_gateway
from wakeful.devtools.webhooks import WebhookSender, stripe_event

SECRET = "demo-signing-secret"
TOKEN = "xoxb-demo"
GITHUB_SECRET, STRIPE_SECRET = "demo-github-secret", "whsec_demo"
GAP, APPROVAL_TTL = 6, 4
NEXT = (
    "next: run it on your own Slack workspace (docs/slack.md), "
    "or write your own agent (docs/agents.md)."
)
"""The demo's last line: where a reader goes from here."""


class DemoFailed(Exception):
    pass


class Demo:
    def __init__(self, out: Callable[[str], None], verbose: bool) -> None:
        self.n = Narrator(out, verbose)
        self.emu = SlackEmulator(
            bot_token=TOKEN,
            bot_user_id="UBOT",
            team_id="T0DEMO",
            users={"U0ALICE": {"tz": "Europe/Berlin"}, "U0BOB": {"tz": "America/New_York"}},
        )
        self.emu.on_call = self.n.on_call
        self.prompt_ts: dict[str, str] = {}
        self.stripe = FakeStripe(webhook_secret=STRIPE_SECRET)

    # -- helpers ----------------------------------------------------------------------------

    def posts(self, needle: str, channel: str = DM) -> list[dict[str, Any]]:
        return [m for m in self.emu.messages(channel) if needle in str(m.get("text", ""))]

    def posted_at(self, channel: str, needle: str) -> float:
        """When the emulator took the first post in `channel` containing `needle`."""
        return next(
            c.at
            for c in self.emu.calls("chat.postMessage")
            if c.params.get("channel") == channel and needle in str(c.params.get("text"))
        )

    def expect(self, what: str, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        if not self.emu.wait_for(lambda _e: predicate(), timeout=timeout):
            raise DemoFailed(f"expected {what}")

    def user(self, who: str, text: str, where: str = "DM") -> None:
        self.n.say(f"         {who} → {where}: {text!r}")

    def click(
        self, who: str, action: str, request_id: str, channel: str = DM, thread: str | None = None
    ) -> int:
        uid = {"alice": "U0ALICE", "bob": "U0BOB"}[who]
        self.n.say(f"         {who} taps [{action.capitalize()}] on request {request_id}")
        prompt = self.prompt(request_id, channel)
        reply = self.sender.block_action(
            uid,
            action,
            request_id,
            channel=channel,
            message_ts=str(prompt.get("ts")),
            thread_ts=thread,
        )
        return reply.status

    def prompt(self, request_id: str, channel: str = DM) -> dict[str, Any]:
        """The prompt message as it stands now (found by its ts once it has been seen)."""
        ts = self.prompt_ts.get(request_id)
        for m in self.emu.messages(channel):
            if m.get("ts") == ts or (ts is None and request_id in str(m.get("blocks", ""))):
                self.prompt_ts[request_id] = str(m.get("ts"))
                return m
        raise DemoFailed(f"no prompt for {request_id}")

    def request_id(self, order: str, channel: str = DM) -> str:
        for m in self.emu.messages(channel):
            if f"refund order {order} " in str(m.get("text", "")) + " " and m.get("blocks"):
                blocks = m["blocks"]
                for b in blocks:
                    if b.get("type") == "actions":
                        return str(b["elements"][0]["value"])
        raise DemoFailed(f"no approval prompt for order {order}")

    # -- the session ------------------------------------------------------------------------

    def gateway(self, tmp: str, store: Any) -> Callable[[], None]:
        """The credential gateway in front of the fake Stripe; the refund desk refunds through
        it (WAKEFUL_REFUNDS=stripe). Returns the function that stops it."""
        worker_env, stop = start_gateway(Path(tmp), self.stripe, store)
        self.saved_env = {k: os.environ.get(k) for k in worker_env}
        os.environ.update(worker_env)
        self.stripe.add_payment("1001", amount=4200)
        url = worker_env["WAKEFUL_GATEWAY_URL"]
        self.gateway_line = (
            f"(Stripe: a fake API at {self.stripe.url}, reached through the gateway at {url})"
        )
        return stop

    def run(self) -> None:
        with (
            tempfile.TemporaryDirectory(prefix="wakeful-demo-") as tmp,
            logs_to(None if self.n.verbose else Path(tmp) / "demo.log"),
            self.emu,
            self.stripe,
        ):
            config = Config(
                bot_token=TOKEN,
                signing_secret=SECRET,
                api_url=self.emu.api_url,
                db=str(Path(tmp) / "demo.db"),
                batch_window=0.4,
                min_digest_period=1,  # WAKEFUL_MIN_DIGEST_PERIOD: digests in a minute's session
                settings=Settings(outbox_gap=GAP, lease_ttl=30, approval_ttl=APPROVAL_TTL),
                webhooks=(
                    WebhookSource("github", "github", GITHUB_SECRET, OPS),
                    WebhookSource("stripe", "stripe", STRIPE_SECRET, OPS),
                ),
            )
            store = self.store = open_store(config.db, config.settings, kinds=SLACK_KINDS)
            stop_gateway = self.gateway(tmp, store)
            runtime = Runtime(config, store, ("worker", "scheduler", "dispatcher"), poll=0.2)
            listeners = Listeners(
                store,
                SECRET,
                "UBOT",
                "BBOT",
                runtime.wake_worker,
                runtime.wake_dispatcher,
                approvers=config.approvers,
            )
            front = SlackFront(listeners, webhook_sources=config.webhooks)
            server = http_server(front, "127.0.0.1", 0)
            stop_http = serve_in_thread(server)
            runtime.start()
            url = f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}"
            self.stripe.webhook_url = f"http://127.0.0.1:{server.effective_port}"
            self.sender = EventSender(url, SECRET, team_id="T0DEMO")
            self.hooks = WebhookSender(
                f"http://127.0.0.1:{server.effective_port}",
                github_secret=GITHUB_SECRET,
                stripe_secret=STRIPE_SECRET,
            )
            self.n.say(f"wakeful demo: app at {url}, Slack emulator at {self.emu.api_url}")
            self.n.say(self.gateway_line)
            self.n.say(f"(outbox gap {GAP} s, approval window {APPROVAL_TTL} s, store {config.db})")
            try:
                self.scenes()
            finally:
                runtime.shutdown()
                stop_http()
                stop_gateway()
                for name, value in self.saved_env.items():
                    os.environ.pop(name, None) if value is None else os.environ.update(
                        {name: value}
                    )
                store.close()

    def scenes(self) -> None:
        say = self.n.say
        say("\n1. A DM delivered twice is answered once")
        self.user("alice", "hello!")
        first = self.sender.message("U0ALICE", "hello!", channel=DM)
        again = self.sender.message(
            "U0ALICE",
            "hello!",
            channel=DM,
            event_id=first.event_id,
            retry_num=1,
            retry_reason="http_timeout",
        )
        say(
            f"         Slack delivers it again (X-Slack-Retry-Num: 1): HTTP {first.status}, "
            f"then {again.status}"
        )
        self.expect("one reply to the first DM", lambda: len(self.posts("Handled 1 message")) == 1)
        time.sleep(1.0)
        if len(self.posts("Handled")) != 1:
            raise DemoFailed("the retried delivery was answered twice")

        say("\n2. Three quick messages, one run, one reply")
        for text in ("are you there?", "I have a question", "about my order"):
            self.user("alice", text)
            self.sender.message("U0ALICE", text, channel=DM)
        self.expect("one reply for three messages", lambda: bool(self.posts("Handled 3 messages")))
        self.help()

        say("\n4. A refund approved")
        self.user("alice", "please refund order 1001")
        self.sender.message("U0ALICE", "please refund order 1001", channel=DM)
        self.expect("an approval prompt", lambda: bool(self.posts("refund order 1001 for")))
        rid = self.request_id("1001")
        self.click("alice", "approve", rid)
        self.expect("the refund", lambda: bool(self.posts("Refunded order 1001 through Stripe")))
        self.expect("the prompt rewritten", lambda: "Approved by" in str(self.prompt(rid)))
        [refund] = self.stripe.refunds.values()
        say(
            f"         Stripe holds {refund['id']} ({refund['amount']} {refund['currency']}), "
            f"made with Idempotency-Key {rid}; its charge.refunded webhook comes back:"
        )
        self.expect(
            "Stripe's confirmation",
            lambda: bool(self.posts(f"Stripe confirmed the refund of order 1001 ({refund['id']}")),
            timeout=GAP + 10,
        )

        say("\n5. A refund denied")
        self.user("alice", "refund order 1002")
        self.sender.message("U0ALICE", "refund order 1002", channel=DM)
        self.expect("an approval prompt", lambda: bool(self.posts("refund order 1002 for")))
        rid = self.request_id("1002")
        self.click("alice", "deny", rid)
        self.expect(
            "the denial",
            lambda: bool(self.posts("Refund for order 1002 denied; nothing was done.")),
        )

        say("\n6. In a channel: a click by the wrong user is refused; then the request expires")
        self.user("alice", "@wakeful refund order 1003", where="#refunds")
        self.sender.mention("U0ALICE", "<@UBOT> refund order 1003", channel=ROOM)
        self.expect("a prompt", lambda: bool(self.posts("refund order 1003 for", ROOM)))
        rid = self.request_id("1003", ROOM)
        self.click("bob", "approve", rid, ROOM)
        self.expect(
            "an ephemeral refusal",
            lambda: any("not yours to answer" in str(e.get("text")) for e in self.emu.ephemerals()),
        )
        say(f"         nobody else answers for {APPROVAL_TTL} s ...")
        self.expect(
            "the expiry",
            lambda: bool(
                self.posts("Refund request for order 1003 expired; nothing was done.", ROOM)
            ),
            timeout=APPROVAL_TTL + 10,
        )
        self.expect("the prompt marked expired", lambda: "Expired" in str(self.prompt(rid, ROOM)))

        say("\n7. Start quiet: a digest only when there is news; held ones merge into one")
        self.user("alice", "digest every 1 second")
        self.sender.message("U0ALICE", "digest every 1 second", channel=DM)
        self.expect("the first digest", lambda: len(self.posts("Digest since")) == 1, timeout=8)
        say(f"         (that digest started the {GAP} s gap) two periods with nothing new ...")
        time.sleep(2.2)
        if len(self.posts("Digest since")) != 1:
            raise DemoFailed("a digest with nothing new was posted")
        say("         ... and nothing was posted. Now news, period after period:")
        for n in (1, 2, 3):
            if n > 1:
                time.sleep(1.1)
            self.user("alice", f"@wakeful note {n}", where="#refunds")
            self.sender.mention("U0ALICE", f"<@UBOT> note {n}", channel=ROOM)
        say("         the digests they earn wait for the gap, then go out as one ...")
        self.expect(
            "held digests merged into ONE digest covering the span",
            lambda: any("This digest covers" in m["text"] for m in self.posts("Digest since")),
            timeout=GAP + 8,
        )
        merged = next(m for m in self.posts("Digest since") if "This digest covers" in m["text"])
        if merged["text"].count("Digest since") != 1:
            raise DemoFailed("the held digests were concatenated, not merged")
        self.user("alice", "@wakeful note 4", where="#refunds")
        self.sender.mention("U0ALICE", "<@UBOT> note 4", channel=ROOM)
        self.expect("a digest held by the gap", self.digest_held, timeout=8)
        say(f"         the next digest waits out the {GAP} s gap; before it ends:")
        self.user("alice", "digest off")
        self.sender.message("U0ALICE", "digest off", channel=DM)
        self.expect("digest off", lambda: bool(self.posts("Digest off.")))
        self.digests = len(self.posts("Digest since"))
        self.digests_settle = time.monotonic() + GAP + 1  # when a held digest would have gone
        if any("Digest since" in m["text"] for m in self.posts("Digest off.")):
            raise DemoFailed("a digest went out with `digest off`")
        if self.digest_held():
            raise DemoFailed("`digest off` left the held digest in the outbox")
        say("         the held digest is withdrawn: no digest is sent after this")
        self.threads_and_home()
        self.webhooks()

    def help(self) -> None:
        """The refund desk's help, streamed: written a line at a time under alice's message,
        shown flush by flush, then ended as one message with nothing left streaming."""
        self.n.say("\n3. Asked for help: the reply shows as it is written, then ends")
        self.user("alice", "help")
        before, asked = len(self.emu.messages(DM)), self.sender.next_ts()
        self.sender.message("U0ALICE", "help", channel=DM, ts=asked)
        self.expect(
            "the help streamed and ended",
            lambda: any(
                s.get("thread_ts") == asked and s.get("streaming_state") == "completed"
                for s in self.emu.streams(DM)
            ),
        )
        under = [m for m in self.emu.messages(DM) if m.get("thread_ts") == asked]
        if len(under) != 1 or len(self.emu.messages(DM)) != before + 1:
            raise DemoFailed("the help was not one message under alice's")
        if under[0].get("text") != "".join(HELP_LINES):
            raise DemoFailed("the help's message does not hold the help")
        ts = under[0]["ts"]
        calls = [c for c in self.emu.calls() if ts in (c.params.get("ts"), c.response.get("ts"))]
        ends = [c.method for c in calls[:1] + calls[-1:]]
        streamed = [streamed_text(c.params) for c in calls if c.method == "chat.appendStream"]
        if ends != ["chat.startStream", "chat.stopStream"] or not any(streamed):
            raise DemoFailed("the help was not streamed, then ended")
        if self.emu.open_streams():
            raise DemoFailed("a stream was left open")

    def threads_and_home(self) -> None:
        say = self.n.say
        say("\n8. A thread follow-up: no new mention needed in a thread the bot answered in")
        self.user("bob", "@wakeful is the refund desk open?", where="#refunds")
        mention = self.sender.next_ts()
        self.sender.mention("U0BOB", "<@UBOT> is the refund desk open?", channel=ROOM, ts=mention)
        self.expect("a reply in the thread", lambda: len(self.in_thread(mention)) == 1)
        self.user("bob", "thanks! and refund order 1005 please", where="#refunds (thread)")
        self.sender.message(
            "U0BOB",
            "thanks! and refund order 1005 please",
            channel=ROOM,
            channel_type="channel",
            thread_ts=mention,
        )
        self.user("alice", "lunch anyone?", where="#refunds")
        lunch = self.sender.message(
            "U0ALICE", "lunch anyone?", channel=ROOM, channel_type="channel"
        )
        self.expect(
            "the follow-up's prompt in the thread",
            lambda: any("refund order 1005" in str(m.get("text")) for m in self.in_thread(mention)),
        )
        say(f"         (the channel chatter was acknowledged, HTTP {lunch.status}, and dropped)")

        say("\n9. The Home tab, as bob would see it (app_home_opened -> views.publish)")
        self.sender.home_opened("U0BOB")
        self.expect("bob's Home tab", lambda: "1005" in self.home("U0BOB"))
        for line in self.home("U0BOB").splitlines():
            say(f"         | {line}")
        rid = self.request_id("1005", ROOM)
        self.click("bob", "deny", rid, ROOM, thread=mention)
        self.expect(
            "the denial in the thread",
            lambda: bool(self.posts("Refund for order 1005 denied; nothing was done.", ROOM)),
        )
        self.expect("the prompt marked denied", lambda: "Denied by" in str(self.prompt(rid, ROOM)))

    def digest_held(self) -> bool:
        """A digest the outbox holds back (the gap) in alice's DM."""
        return any(
            r.kind == "digest" and r.channel == DM for r in self.store.outbox(status="pending")
        )

    def in_thread(self, thread: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.emu.messages(ROOM)
            if m.get("thread_ts") == thread and m.get("ts") != thread
        ]

    def home(self, user: str) -> str:
        views = self.emu.homes(user)
        text = indent(as_text(views[-1]["blocks"])) if views else ""
        return text.replace("\n" + " " * 31, "\n")

    def webhooks(self) -> None:
        say = self.n.say
        say("\n10. Webhooks into #ops: a redelivered GitHub event is one line; a burst is one post")
        first = self.hooks.github_example("issues.opened")
        again = self.hooks.github_example("issues.opened", delivery=first.delivery_id)
        say(
            f"         GitHub delivers issues.opened, then redelivers it (same X-GitHub-Delivery):"
            f" HTTP {first.status} {first.text!r}, then {again.status} {again.text!r}"
        )
        self.expect("one line for the issue", lambda: bool(self.posts("GitHub issues.opened", OPS)))
        time.sleep(1.0)
        if len(self.posts("GitHub issues.opened", OPS)) != 1:
            raise DemoFailed("the redelivered GitHub event was reported twice")
        kinds = ("charge.succeeded", "charge.dispute.created", "invoice.payment_failed")
        for kind in kinds:
            sent = self.hooks.stripe(stripe_event(kind))
            say(f"         Stripe sends {kind}: HTTP {sent.status} {sent.text!r}")
        say(f"         the three lines wait for the {GAP} s gap after the GitHub line ...")
        self.expect(
            "one post with the three Stripe lines",
            lambda: any(all(k in m["text"] for k in kinds) for m in self.posts("Stripe", OPS)),
            timeout=GAP + 8,
        )
        burst = [m for m in self.posts("Stripe", OPS) if any(k in m["text"] for k in kinds)]
        if len(burst) != 1:  # (the refund's charge.refunded was reported scenes before)
            raise DemoFailed("the Stripe burst was not merged into one post")
        github, stripe = (
            self.posted_at(OPS, k) for k in ("GitHub issues.opened", "Stripe charge.succeeded")
        )
        if stripe - github < GAP - 1:  # the engine counts the gap in whole seconds
            waited = f"{stripe - github:.1f} s"
            raise DemoFailed(f"the Stripe burst went out {waited} after the last post, not paced")
        time.sleep(max(0.0, self.digests_settle - time.monotonic()))
        if len(self.posts("Digest since")) != self.digests:
            raise DemoFailed("a digest went out after `digest off`")
        say("\ndemo finished: every step above was checked against what Slack received.")
        say(NEXT)


@contextlib.contextmanager
def logs_to(path: Path | None) -> Iterator[None]:
    """The process's log lines into `path` for the demo's length, so the narration is all the
    terminal shows (None: leave them on stderr). If the demo fails, the last lines are shown
    on stderr: they say why."""
    if path is None:
        yield
        return
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    with open(path, "a", encoding="utf-8") as file:
        before = [h.setStream(file) for h in handlers]
        try:
            yield
        except BaseException:
            file.flush()
            tail = path.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
            print("\n".join(["wakeful demo: the app's last log lines:", *tail]), file=sys.stderr)
            raise
        finally:
            for handler, stream in zip(handlers, before, strict=True):
                handler.setStream(stream or sys.stderr)


def run_demo(verbose: bool = False, out: Callable[[str], None] = print) -> int:
    try:
        Demo(out, verbose).run()
    except DemoFailed as exc:
        print(f"wakeful demo: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0
