"""The spans of a worker's runs (issue 39, core/tracing.py): each run a span from its claim to
its finish's commit, the agent's work a child of it, the claim and the finish its events.

Kept apart from the worker loop (core/worker.py), which calls it at those moments; with
tracing off every call returns after one flag check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wakeful.core import tracing
from wakeful.core.effects import Effects
from wakeful.core.errors import StoreUnavailable
from wakeful.core.outage import Ran
from wakeful.core.records import Claim

if TYPE_CHECKING:
    from opentelemetry.trace import Span

Outcomes = list[tuple[Ran, bool | None, Claim | None]]
"""Each run of a finish, and whether it finished (False: fenced; None: not written), with
the claim its finish made of what follows."""


@dataclass
class RunSpans:
    """A worker's runs' spans, the open ones kept by run id until their finish commits."""

    attempt_trace: Callable[[Sequence[int]], str | None]
    """The store's trace of the latest failed attempt of some events (a retry links to it)."""
    _open: dict[str, Span] = field(default_factory=dict)

    def start(self, claim: Claim, run_id: str, claimed: tuple[int, int] | None) -> Span | None:
        """A run's span: a child of its first event's stored trace (the request that stored
        it), linked to its other events' (a retried event, claimed alone, runs under the same
        parent as its failed attempt: both in its trace, told apart by `wakeful.attempt`) and,
        a retry, to the latest failed attempt's run. When this round claimed it (`claimed`:
        when the claim began and ended, ns), it starts at the claim, an event of its own."""
        if not tracing.ON:
            return None
        traces = tracing.stored(claim.events)
        if any(e.attempts > 1 for e in claim.events):  # one indexed read, retries only
            traces.append(self.attempt_trace(claim.ids))
        attrs = {
            "wakeful.inbox": claim.inbox,
            "wakeful.lease.generation": claim.gen,
            "wakeful.attempt": max(e.attempts for e in claim.events),
            "wakeful.event_ids": claim.ids,
            "wakeful.run_id": run_id,
        }
        begun = None if claimed is None else claimed[0]
        made = tracing.start("wakeful.run", attrs, traces[0], traces[1:], start_ns=begun)
        if claimed is not None:
            took = {"wakeful.claim.ms": (claimed[1] - claimed[0]) / 1e6}
            tracing.event(made, "wakeful.claim", took, claimed[1])
        return made

    def keep(self, run_id: str, span: Span | None) -> None:
        """A run that returned: its span ends with its finish (`end`)."""
        if span is not None:
            self._open[run_id] = span

    @contextmanager
    def agent(self, span: Span | None, name: str) -> Iterator[Callable[[Effects], None]]:
        """The agent's work as a child of its run's span (its log lines join it); the block
        gets a callable to say what the run returned, which marks an agent's failure."""

        def said(effects: Effects) -> None:
            errors = [*effects.failed.values(), *effects.dead.values()]
            if errors:  # the agent's failure, its class before the first colon
                tracing.note({}, str(errors[0]).split(":", 1)[0] or "failed")

        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        with tracing.inside(span), tracing.span("wakeful.agent", attrs):
            yield said

    def commit(
        self,
        pending: list[Ran],
        commit: Callable[[list[Ran]], tuple[Outcomes, StoreUnavailable | None]],
    ) -> tuple[Outcomes, StoreUnavailable | None]:
        """`commit(pending)`, each run's finish an event of its run's span, and each row it
        queues storing its run's trace, though the runs share one transaction."""
        if not tracing.ON:
            return commit(pending)
        runs = [(r, self._open.get(r.run_id)) for r in pending]
        rows = {r.claim.inbox: tp for r, span in runs if (tp := tracing.traceparent_of(span))}
        results: Outcomes = []
        began = time.time_ns()
        try:
            with tracing.rows_for(rows):
                results, refused = commit(pending)
        finally:
            ended = time.time_ns()
            done = {id(ran): finished for ran, finished, _ in results}
            attrs = {
                "wakeful.finish.runs": len(pending) if len(pending) > 1 else None,
                "wakeful.finish.ms": (ended - began) / 1e6,
            }
            for ran, span in runs:
                finished = done.get(id(ran))  # False: fenced; None: not written (the store)
                said = {**attrs, "wakeful.finished": finished is True}
                tracing.event(span, "wakeful.finish", said, ended)
        return results, refused

    def end(self, ran: Ran, outcome: str) -> None:
        """End a run's span with its outcome; anything but done failed."""
        made = self._open.pop(ran.run_id, None) if self._open else None
        if made is not None:
            tracing.end(made, {"wakeful.outcome": outcome}, None if outcome == "done" else outcome)
