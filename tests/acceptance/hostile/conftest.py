"""The hostile-input modules' server: one real front over one SQLite file per module
(tests/support/hostile.py).

The rules under test (bot/front/wsgi.py, bot/front/payloads.py, bot/front/signature.py):
- signature and timestamp are checked before anything is parsed: a forged, stale, truncated or
  duplicated signature is a 401, and nothing reaches the store;
- a correctly signed body that is not what Slack sends is a 400 (a non-UTF-8 body is a 401:
  slack_sdk decodes the body as UTF-8 to compute the signature), and stores nothing;
- a correctly signed body of a kind this app does not handle is a 200 that stores nothing;
- a correctly signed body naming a user, team, org or conversation by something that is not a
  Slack id (`[A-Z0-9]{1,32}`: a newline, an escape, a colon...) is a 400 that stores nothing
  and that no log line quotes (issue 34, item 6 a);
- a body over BODY_CAP is a 413; HTTP-level garbage is a 4xx (404, 405, 400);
- never a 5xx, never a hang (client timeout CLIENT_TIMEOUT), never a dropped connection.

"Stores nothing" is checked on every table the front could touch (events, approvals and their
answers, outbox, recorded steps, timers, sessions) before and after each request.

The fuzz tests count the requests they send; the total is printed at the end (run with -s).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.hostile import Live, start_live


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with start_live(tmp_path_factory.mktemp("hostile")) as running:
        yield running
