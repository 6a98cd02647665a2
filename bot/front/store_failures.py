"""One answer to a store failure at every HTTP entry (Slack requests, OAuth pages, webhooks).

Whatever the store's failure, nothing of the request was stored, and the cause is on this
side: the answer is always 503 with "please retry", so Slack, Stripe and any sender that
retries take it as a passing refusal and the retry is stored once the store is back.
"""

from __future__ import annotations

import logging

from wakeful.core.errors import StoreError, StoreUnavailable

RETRY = (503, "store unavailable; please retry")

_log = logging.getLogger("wakeful.front")


def answer_to(error: StoreError) -> tuple[int, str]:
    """The HTTP answer to `error`; a failure other than "unavailable" is logged, since no
    retry will cure it by itself and the operator needs its cause."""
    if not isinstance(error, StoreUnavailable):
        _log.error("store error answering a request: %s", error)
    return RETRY
