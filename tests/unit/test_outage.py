"""The worker's outage bookkeeping (core/outage.py) against a store that refuses at will."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.conftest import T0
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects
from wakeful.core.errors import StoreUnavailable
from wakeful.core.outage import Outage, Ran, backoff
from wakeful.core.records import Claim
from wakeful.core.settings import Settings


@dataclass
class Refusing:
    """Takes give-backs and renewals until `down`; `broken` claims fail for their own reason."""

    settings: Settings = field(default_factory=lambda: Settings(lease_ttl=60))
    down: bool = False
    broken: set[str] = field(default_factory=set)
    given: list[str] = field(default_factory=list)
    renewed: list[tuple[str, int]] = field(default_factory=list)

    def give_back(self, claim: Claim, now: int) -> int:
        if self.down:
            raise StoreUnavailable("disk full")
        if claim.inbox in self.broken:
            raise ValueError("no such claim")
        self.given.append(claim.inbox)
        return 1

    def renew(self, inbox: str, holder: str, gen: int, now: int) -> bool:
        if self.down:
            raise StoreUnavailable("disk full")
        self.renewed.append((inbox, now))
        return True


def claim(inbox: str, at: int = T0) -> Claim:
    return Claim(inbox, "w", 1, claimed_at=at)


def test_backoff_doubles_from_a_tenth_of_a_second_up_to_the_most() -> None:
    assert [backoff(n, 2.0) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert backoff(500, 2.0) == 2.0


def test_refusals_in_a_row_push_the_retry_back_and_acceptance_ends_the_count() -> None:
    outage = Outage(Refusing(), ManualClock(T0), "w", most=2.0)
    outage.refused(10.0)
    assert outage.retry_at == pytest.approx(10.1)
    outage.refused(11.0)
    assert outage.retry_at == pytest.approx(11.2)
    outage.accepted()
    outage.refused(20.0)
    assert outage.retry_at == pytest.approx(20.1)


def test_claims_are_given_back_in_order_and_the_rest_kept_while_the_store_refuses() -> None:
    store = Refusing(down=True, broken={"b"})
    outage = Outage(store, ManualClock(T0), "w", most=2.0)
    outage.caught(StoreUnavailable("disk full"), [], [claim("a"), claim("b"), claim("c")])
    with pytest.raises(StoreUnavailable):
        outage.give_back_claims()
    assert len(outage.give_back) == 3 and outage.pending
    store.down = False
    outage.give_back_claims()  # "b" fails for its own reason: logged, dropped, not retried
    assert store.given == ["a", "c"]
    assert not outage.pending


def test_held_runs_have_their_lease_renewed_at_half_its_term_only() -> None:
    store = Refusing()
    clock = ManualClock(T0)
    outage = Outage(store, clock, "w", most=2.0)
    old, fresh = claim("old", T0 - 30), claim("fresh", T0 - 29)
    outage.caught(
        StoreUnavailable("x"), [Ran(c, Effects(), 0.0, c.inbox) for c in (old, fresh)], []
    )
    outage.keep_leases()
    assert store.renewed == [("old", T0)]
    clock.now += 1
    outage.keep_leases()  # "old" was renewed a second ago; "fresh" is at half its term now
    assert store.renewed == [("old", T0), ("fresh", T0 + 1)]
    assert [r.renewed_at for r in outage.take_held()] == [T0, T0 + 1]
    assert not outage.pending
