"""ServerClock: the host clock plus the measured offset to the database server's clock."""

from __future__ import annotations

from wakeful.core.clock import ServerClock


class Source:
    def __init__(self, now: float | None) -> None:
        self.now = now
        self.asked = 0
        self.down = False

    def server_time(self) -> float | None:
        self.asked += 1
        if self.down:
            raise ConnectionError("database unreachable")
        return self.now


def test_the_offset_is_measured_then_refreshed_and_kept_through_an_outage() -> None:
    host, mono = [1000.0], [0.0]
    source = Source(now=1030.0)  # the server runs 30 s ahead of this host
    clock = ServerClock(source, refresh=30, host=lambda: host[0], monotonic=lambda: mono[0])
    assert clock() == 1030 and source.asked == 1
    host[0], mono[0] = 1010.0, 10.0
    assert clock() == 1040 and source.asked == 1  # within the refresh: no query
    source.down = True
    host[0], mono[0] = 1050.0, 40.0
    assert clock() == 1080 and source.asked == 2  # measured, failed, the offset stands
    host[0], mono[0] = 1051.0, 41.0
    assert clock() == 1081 and source.asked == 2  # a failure waits a refresh before retrying
    source.down, source.now = False, 1100.0
    host[0], mono[0] = 1100.0, 80.0
    assert clock() == 1100 and clock.offset == 0.0  # the host caught up; so does the clock


def test_a_first_measurement_that_failed_is_retried_after_a_second_not_a_refresh() -> None:
    host, mono = [1000.0], [0.0]
    source = Source(now=1030.0)
    source.down = True  # the process starts while the server is unreachable
    clock = ServerClock(source, refresh=30, host=lambda: host[0], monotonic=lambda: mono[0])
    assert clock() == 1000 and source.asked == 1  # no offset yet: the host clock
    mono[0] = 0.5
    assert clock() == 1000 and source.asked == 1  # not before a second
    source.down = False
    mono[0] = 1.0
    assert clock() == 1030 and source.asked == 2  # measured a second later
    source.down = True
    mono[0] = 31.0
    assert clock() == 1030 and source.asked == 3
    mono[0] = 32.0
    assert clock() == 1030 and source.asked == 3  # once measured, a failure waits a refresh


def test_a_store_without_a_clock_of_its_own_leaves_the_host_clock_alone() -> None:
    clock = ServerClock(Source(now=None), host=lambda: 1234.9)
    assert clock() == 1234 and clock.offset == 0.0
