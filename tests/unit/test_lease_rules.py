from wakeful.core.records import Lease
from wakeful.core.rules.lease import grant, holds
from wakeful.core.settings import Settings

NOW = 1000


def test_no_row_gives_generation_one() -> None:
    assert grant(None, "I", "A", NOW, 120) == Lease("I", "A", 1, NOW + 120)


def test_same_holder_unexpired_renews_and_keeps_generation() -> None:
    current = Lease("I", "A", 4, NOW + 10)
    assert grant(current, "I", "A", NOW, 120) == Lease("I", "A", 4, NOW + 120)


def test_expired_lease_is_taken_over_with_next_generation_even_by_same_holder() -> None:
    current = Lease("I", "A", 4, NOW)  # expires exactly now: expired
    assert grant(current, "I", "A", NOW, 120) == Lease("I", "A", 5, NOW + 120)
    assert grant(current, "I", "B", NOW, 120) == Lease("I", "B", 5, NOW + 120)


def test_lease_held_by_someone_else_is_refused() -> None:
    assert grant(Lease("I", "A", 2, NOW + 1), "I", "B", NOW, 120) is None


def test_holds_requires_holder_generation_and_time() -> None:
    lease = Lease("I", "A", 3, NOW + 5)
    assert holds(lease, "A", 3, NOW)
    assert not holds(lease, "B", 3, NOW)
    assert not holds(lease, "A", 2, NOW)
    assert not holds(lease, "A", 3, NOW + 5)
    assert not holds(None, "A", 3, NOW)


def test_backoff_doubles_from_ten_seconds_and_caps_at_fifteen_minutes() -> None:
    s = Settings()
    assert [s.backoff(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 320, 640, 900]
    assert s.backoff(1000) == 900
    assert Settings(backoff_base=3, backoff_cap=7).backoff(3) == 7
