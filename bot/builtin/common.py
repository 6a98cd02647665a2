"""What both built-in agents say and ask the same way: the facts of a digest, the status text,
the refund rules (each order refunded once per workspace, whoever asks there: order numbers
are per customer), and how a time zone is named. One
place, so the two agents cannot drift apart. Written on the public agent API alone
(`wakeful.agents`), like any agent of a user's."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wakeful.agents import (
    InvalidInput,
    Query,
    SessionUnusable,
    Setup,
    StepRecord,
    Steps,
    StoredEvent,
    Zone,
    digest,
    inert,
    utc,
)

if TYPE_CHECKING:
    from wakeful.bot.builtin.stripe_refunds import StripeRefunds

DIGEST = "digest"
"""The timer name of an inbox's digest."""
MIN_DIGEST_SECONDS = 60
"""The default of WAKEFUL_MIN_DIGEST_PERIOD, the shortest digest period either built-in agent
sets: a digest every second would be a post every second in someone's conversation."""


def digest_too_often(every: int, minimum: int) -> str | None:
    """Why a digest every `every` seconds is not set, or None when it may be (`minimum`:
    `setup.settings.min_digest_period`)."""
    if every >= minimum:
        return None
    return (
        f"Digest not set: every {plural(every, 'second')} is too often; the shortest period "
        f"is {plural(minimum, 'second')} (e.g. `digest every 1 hour`)."
    )


def not_done_text(order: str, error: str) -> str:
    """What the person hears of an approved refund that was not done (`ApprovalAnswer.error`:
    a permanent failure, or the payment service unreachable until wakeful gave up). `order`
    is shown as it is given (already inert)."""
    why = inert(error.rstrip(". "))
    return f"The refund of order {order} was not done: {why}. Nothing was refunded."


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def ids_note(events: Sequence[StoredEvent]) -> str:
    return f" (ids {', '.join(str(e.id) for e in events)})" if events else ""


def fresh_stats() -> dict[str, int]:
    """The counters a digest reports, zeroed when a digest goes out."""
    return {"messages": 0, "approved": 0, "denied": 0, "expired": 0, "refunds": 0}


SESSION_RESET = (
    "I had to start over in this conversation: my saved state could not be used ({reason}). "
    "The message I was working on could not be handled; please send it again."
)


def unusable_session(reason: str) -> SessionUnusable:
    """The failure a run raises when the saved state, not the events, is the problem; it says
    so to the person (once, when the engine gives up on the state and sets it aside)."""
    return SessionUnusable(reason, notice=SESSION_RESET.format(reason=inert(reason)))


def zone_shown(zone: Zone, again: str) -> str:
    """How a reply names the zone it used: the zone itself, or, when UTC stands in,
    `UTC: <why>`. A zone that could not be read is read again on a later run, so `again`
    tells the person how to get theirs; UTC is never saved as theirs."""
    if zone.known:
        return zone.name
    if "could not be read" in zone.reason:
        return f"UTC: {zone.reason}; {again}"
    return f"UTC: {zone.reason}"


def outage_note(skipped: int, unit: str) -> str | None:
    """How much a digest covers when `skipped` periods (of `unit`: day or period) were missed."""
    if not skipped:
        return None
    return f"After an outage, this digest covers {plural(skipped + 1, unit)} ({skipped} missed)."


def digest_lines(
    query: Query,
    inbox: str,
    stats: Mapping[str, int],
    channel: str | None = None,
    since: int | None = None,
    reported_dead: Collection[int] = (),
) -> list[digest.Facts]:
    """What happened since the last digest as fact lines (wakeful.agents.digest): counts that
    add up when held digests merge, states (pending approvals, dead events) that the latest
    tells; with the digest's `channel` and start, the webhook deliveries reported there too.
    A dead event not in `reported_dead` counts as news."""
    pending = len(query.open_approvals(inbox))
    dead = query.dead_events(inbox)
    new_dead = sum(1 for e in dead if e.id not in set(reported_dead))
    approvals = (
        "approvals: {approved} approved, {denied} denied, {expired} expired, {pending} pending"
    )
    lines = [
        digest.line("messages", "messages handled: {messages}", {"messages": stats["messages"]}),
        digest.line(
            "approvals",
            approvals,
            {k: stats[k] for k in ("approved", "denied", "expired")},
            pending=pending,
        ),
        digest.line("refunds", "refunds done: {refunds}", {"refunds": stats["refunds"]}),
        digest.line(
            "dead",
            f"dead events: {len(dead)}{ids_note(dead)}" if dead else "dead events: none",
            {"new_dead": new_dead},
        ),
    ]
    if "feedback_positive" in stats:  # an agent whose replies carry feedback buttons
        counts = {"positive": stats["feedback_positive"], "negative": stats["feedback_negative"]}
        text = "feedback on replies: {positive} positive, {negative} negative"
        lines.append(digest.line("feedback", text, counts))
    if channel and since is not None:
        lines.extend(webhook_lines(query, channel, since))
    return lines


def digest_facts(
    query: Query,
    inbox: str,
    stats: Mapping[str, int],
    channel: str | None = None,
    since: int | None = None,
) -> list[str]:
    """What happened since the last digest, one fact a line (see `digest_lines`)."""
    return digest.render_lines(digest_lines(query, inbox, stats, channel, since))


def webhook_lines(query: Query, channel: str, since: int) -> list[digest.Facts]:
    """`webhook deliveries: 5 (github 2, stripe 3)` for a conversation webhooks report to,
    nothing for one they do not (a person's DM digest stays as it was)."""
    counts = query.deliveries(channel, since)
    if not counts:
        return []
    total = {"deliveries": sum(counts.values())}
    line = digest.line("webhooks", "webhook deliveries: {deliveries} ({by})", total)
    return [{**line, "by": counts}]


def status_text(query: Query, inbox: str) -> str:
    """Pending and dead events (with ids), open approvals and the next digest of an inbox."""
    pending = [e for e in query.pending_events(inbox) if e.status == "pending"]
    dead = query.dead_events(inbox)
    lines = [
        f"Status: {plural(len(pending), 'pending event')}{ids_note(pending)}, "
        f"{len(dead)} dead{ids_note(dead)}"
    ]
    open_approvals = query.open_approvals(inbox)
    if open_approvals:
        described = "; ".join(
            inert(f"{a.id} ({a.tool} {_order_id(a.args)}, expires {utc(a.deadline)})")
            for a in open_approvals
        )
        lines.append(f"Open approvals: {described}")
    else:
        lines.append("Open approvals: none")
    found = next((t for t in query.timers(inbox) if t.id.endswith(f"/{DIGEST}")), None)
    lines.append(
        "Next digest: none scheduled" if found is None else f"Next digest: {utc(found.next_at)}"
    )
    return "\n".join(lines)


REFUND_TOOL = "refund_order"
ORDER_REFUNDED = "refund_order:once"
"""The step name of the one record per refunded order (key `refund_order:<order id>`, in the
workspace of the run: stored as `<team>:refund_order:<order id>`), written before the refund
is reported: whichever request of the workspace records it first is the one that refunds."""
ALREADY_REFUNDED = "Order {order} was already refunded on {when} (request {request})."
REFUNDED_BEFORE = (
    "Order {order} was already refunded, before refunds were kept per workspace; ask an "
    "operator if it must be refunded again."
)
"""A record from before step keys were scoped that another workspace's request made: it
still counts (nothing is refunded twice), but whose request and when are not this
workspace's to see."""
ALREADY_WAITING = (
    "Order {order} is already waiting for approval (request {request}); I did not ask again."
)


def refunded_key(order: str) -> str:
    return f"{REFUND_TOOL}:{order}"


def refund_already(
    query: Query, order: str, asking: Collection[tuple[str, Any]] = (), now: int = 0
) -> str | None:
    """The answer to a request to refund `order` when it must not be asked for again: the
    order was refunded, or an approval for it is open (in the store, or among `asking`, the
    (request id, args) this run is about to ask for); None when it may be asked."""
    first = query.step(refunded_key(order))
    if first is not None:
        return _already_refunded(query, order, first)
    open_ = [(a.id, a.args) for a in query.open_approvals(tool=REFUND_TOOL) if a.deadline > now]
    for request_id, args in [*open_, *asking]:
        if isinstance(args, dict) and str(args.get("order_id")) == order:
            return ALREADY_WAITING.format(order=inert(order), request=inert(request_id))
    return None


def refund_backend(setup: Setup) -> StripeRefunds | None:
    """Where refunds go: Stripe through the credential gateway with `WAKEFUL_REFUNDS=stripe`
    (the gateway's destination `WAKEFUL_STRIPE_DESTINATION`, default `stripe`), else None: the
    local ledger (the default, which calls nothing outside wakeful)."""
    mode = setup.env.get("WAKEFUL_REFUNDS", "").strip().lower() or "ledger"
    if mode == "ledger":
        return None
    if mode != "stripe":
        raise InvalidInput(f"WAKEFUL_REFUNDS must be ledger or stripe, got {mode!r}")
    if setup.gateway is None:
        raise InvalidInput(
            "WAKEFUL_REFUNDS=stripe needs the credential gateway: set WAKEFUL_GATEWAY_CONFIG "
            "(wakeful serve starts the gateway) or WAKEFUL_GATEWAY_URL (one running elsewhere)"
        )
    try:
        from wakeful.bot.builtin.stripe_refunds import StripeRefunds
    except ImportError as exc:
        raise InvalidInput(
            "WAKEFUL_REFUNDS=stripe needs the stripe package: pip install 'wakeful[stripe]'"
        ) from exc
    destination = setup.env.get("WAKEFUL_STRIPE_DESTINATION", "").strip() or "stripe"
    return StripeRefunds(setup.gateway, destination)


def refund_once(
    steps: Steps,
    query: Query,
    order: str,
    request_id: str,
    stripe: StripeRefunds | None = None,
) -> dict[str, Any]:
    """Refund `order` under `request_id` (the approval's id: a retried run gets the recorded
    result back): through Stripe when `stripe` is given, else the local ledger's refund. The
    per-order record that stands says which request refunded the order, so two approvals of
    one order refund it once."""
    if stripe is not None:
        done = query.step(refunded_key(order))
        by = done.result.get("request") if done and isinstance(done.result, dict) else None
        if done is not None and by != request_id:
            already = _already_refunded(query, order, done)
            return {"refunded": False, "order_id": order, "already": already}
        return stripe.refund(steps, query, order, request_id)
    record = {"order_id": order, "request": request_id}
    first = steps.once(refunded_key(order), lambda _key: record, name=ORDER_REFUNDED)
    if isinstance(first, dict) and first.get("request") != request_id:
        stood = query.step(refunded_key(order))
        already = _already_refunded(query, order, stood) if stood else ALREADY_REFUNDED
        return {"refunded": False, "order_id": order, "already": already}
    return {"refunded": True, "order_id": order}


def _already_refunded(query: Query, order: str, record: StepRecord) -> str:
    first = record.result if isinstance(record.result, dict) else {}
    request = str(first.get("request") or "?")
    if record.inbox is None and _of_another_workspace(query, request):
        return REFUNDED_BEFORE.format(order=inert(order))
    return ALREADY_REFUNDED.format(
        order=inert(order), when=utc(record.created_at), request=inert(request)
    )


def _of_another_workspace(query: Query, request: str) -> bool:
    """Whether the approval `request` was asked in another workspace than the run's."""
    return query.approval(request) is None and query.approval(request, everywhere=True) is not None


def dead_letters_text(query: Query, limit: int = 10) -> str:
    """Dead events and parked outbox rows with their errors, for an approver's eyes."""
    dead = query.dead_letters(limit=limit)
    lines = [f"Dead events: {len(dead.events)}"]
    lines += [inert(f"- event {e.id} ({e.inbox}): {(e.error or '')[:200]}") for e in dead.events]
    lines.append(f"Parked posts: {len(dead.outbox)}")
    lines += [
        inert(f"- outbox {r.id} to {r.channel}: {(r.error or '')[:200]}") for r in dead.outbox
    ]
    return "\n".join(lines)


def _order_id(args: Any) -> str:
    return str(args.get("order_id", "")) if isinstance(args, dict) else ""
