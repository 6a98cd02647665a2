"""What a worker holds through a store outage, and when it tries the store again.

A store that cannot take writes at all (a full disk, a server refusing connections) is
nobody's fault: a run it caught keeps its effects and its finish is retried while its lease is
kept alive, a claim it caught before its run gives its attempt back, and the worker backs off
between tries, so no outage spends an attempt or turns an event dead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from wakeful.core.clock import Clock
from wakeful.core.effects import Effects
from wakeful.core.errors import StoreUnavailable
from wakeful.core.records import Claim
from wakeful.core.settings import Settings

log = logging.getLogger("wakeful")

FIRST_RETRY = 0.1
"""Seconds before the first retry after a refusal; each refusal in a row doubles it."""


class OutageStore(Protocol):
    """The store as the outage bookkeeping uses it."""

    @property
    def settings(self) -> Settings: ...

    def give_back(self, claim: Claim, now: int) -> int: ...

    def renew(self, inbox: str, holder: str, gen: int, now: int) -> bool: ...


def backoff(refusals: int, most: float) -> float:
    """Seconds to leave the store alone after `refusals` refusals in a row (at least one)."""
    return min(most, FIRST_RETRY * 2.0 ** min(refusals - 1, 10))


@dataclass(slots=True)
class Ran:
    """A run whose agent has returned, waiting for its finish to be committed (its effects
    become its failure if the store refuses them)."""

    claim: Claim
    effects: Effects
    started: float
    run_id: str
    renewed_at: int = 0
    """When its lease was last known renewed (store clock); 0: at its claim."""

    def __post_init__(self) -> None:
        self.renewed_at = self.renewed_at or self.claim.claimed_at


@dataclass
class Outage:
    """The runs and claims a store outage caught, and how long to leave the store alone."""

    store: OutageStore
    clock: Clock
    holder: str
    most: float
    """Most seconds between tries (`Worker.store_retry`)."""
    held: list[Ran] = field(default_factory=list)
    """Runs whose finish the store refused as unavailable: finished later, same effects."""
    give_back: list[Claim] = field(default_factory=list)
    """Claims the outage ended before (or, a lease having lapsed, after) their run, or the
    worker let go of unrun to run a retry alone: their attempt goes back."""
    refusals: int = 0
    """Refusals in a row."""
    retry_at: float = 0.0
    """No store work before this (monotonic)."""

    @property
    def pending(self) -> bool:
        """Whether something caught is still to be finished or given back."""
        return bool(self.held or self.give_back)

    def caught(self, exc: StoreUnavailable, held: list[Ran], claims: list[Claim]) -> None:
        """Keep what a run of claims was doing when the store became unavailable."""
        self.held += held
        self.give_back += claims
        log.warning(
            "%s: store unavailable (%s); %d run(s) held for their finish, %d claim(s) to "
            "give back: no attempt is spent on the store's failure",
            self.holder,
            exc,
            len(self.held),
            len(self.give_back),
        )

    def refused(self, t: float) -> None:
        """The store refused this round: leave it alone for a while (`t`: now, monotonic)."""
        self.refusals += 1
        self.retry_at = t + backoff(self.refusals, self.most)

    def accepted(self) -> None:
        """A round went through: the outage, if there was one, is over."""
        if self.refusals:
            log.warning("%s: the store is available again", self.holder)
        self.refusals = 0

    def take_held(self) -> list[Ran]:
        held, self.held = self.held, []
        return held

    def give_back_claims(self) -> None:
        """Give back the attempts of the claims caught; raises StoreUnavailable (keeping the
        rest) while the store still refuses."""
        while self.give_back:
            claim = self.give_back[0]
            try:
                given = self.store.give_back(claim, self.clock())
            except StoreUnavailable:
                raise
            except Exception:
                log.exception("%s: could not give back %s %s", self.holder, claim.inbox, claim.ids)
                given = 0
            self.give_back.pop(0)
            if given:
                log.info(
                    "%s: %s: %d event(s) back to pending, not run, with their attempt given back",
                    self.holder,
                    claim.inbox,
                    given,
                )

    def keep_leases(self) -> None:
        """Renew the lease of each held run at half its term, so a store that still takes
        small writes but not the finish (a disk that is nearly full) does not let it lapse:
        the finish can still land, and the agent is not run again."""
        now = self.clock()
        for ran in self.held:
            if now - ran.renewed_at < self.store.settings.lease_ttl / 2:
                continue
            claim = ran.claim
            try:
                if self.store.renew(claim.inbox, self.holder, claim.gen, now):
                    ran.renewed_at = now
            except StoreUnavailable:
                return  # the store takes nothing now; the finish's retry will tell
            except Exception:
                log.exception("%s: could not renew %s", self.holder, claim.inbox)
                return
