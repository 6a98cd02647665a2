"""One root exception for wakeful, so callers can catch the engine's failures apart from bugs."""

from __future__ import annotations

from typing import Protocol


class Notice(Protocol):
    """What a notice carried by an error is: a post to a conversation (a
    `wakeful.core.effects.Post`). Described, not imported, so this module, which every other
    imports, imports none of them."""

    @property
    def channel(self) -> str: ...

    @property
    def text(self) -> str: ...


class WakefulError(Exception):
    """Root of every error the engine raises on purpose."""


class InvalidInput(WakefulError, ValueError):
    """The caller passed something malformed; nothing was stored."""


class StoreError(WakefulError):
    """The store failed in a way the caller cannot fix by changing its input."""


class StoreUnavailable(StoreError):
    """The store cannot take a write right now (busy, locked, disk full, unreachable).

    Transient by nature: an HTTP front answers 503 so Slack retries the delivery.
    """


class StoreReplaced(StoreUnavailable):
    """The store's file was deleted or replaced under this process. Every transaction refuses
    from then on (503 to Slack, /healthz fails) until an operator restores the store and
    restarts the process: a write acknowledged now would land in a file no one will read, or
    in one the process did not open."""


class LeaseLost(WakefulError):
    """The caller no longer holds the inbox's lease in the generation it claimed under."""


class Interrupted(WakefulError):
    """The person wrote again while their run worked, and the agent answers the newest words
    (`Agent.on_new_message = "interrupt"`): raised at the run's next step boundary, never
    inside a step. Nothing the run asked for is written, a reply it streamed is taken back,
    and its events go back, their attempt given back, to run again with the newer message."""


class SessionUnusable(WakefulError):
    """A run failed because of the inbox's saved session, not because of its events (a model
    API that rejects the saved conversation, a state the agent cannot decode).

    Retried like any failure; when the attempts are used up the events are dead-lettered
    with this reason, the session is set aside for the operator (kept, not deleted) and the
    inbox's next events start from a fresh one, so one bad state cannot block an inbox for
    good. `notice`, when the agent gives one, tells the person once, in that same finish: a
    text goes to the conversation of the batch's latest event that names one."""

    ERROR_PREFIX = "session unusable: "
    """How the events' error starts, so the store can tell them from other failures."""

    def __init__(self, reason: str, notice: Notice | str | None = None) -> None:
        super().__init__(reason)
        self.notice = notice


class SendError(WakefulError):
    """A sender could not deliver a part."""


class TransientSendError(SendError):
    """Delivery may work later (rate limited, 5xx, network): the rows are kept and retried."""

    def __init__(self, message: str, retry_after: int = 0) -> None:
        super().__init__(message)
        self.retry_after = max(0, int(retry_after))


class PermanentSendError(SendError):
    """Delivery will not work without a person (channel gone, bad auth): the rows are parked.

    `notice`, when the sender gives one, tells the person who caused the part (the bot is not
    in that channel, it is archived, ...) what happened and what to do: queued in the very
    transaction that parks the rows, so it is written once however often the part is tried."""

    def __init__(self, message: str, notice: Notice | None = None) -> None:
        super().__init__(message)
        self.notice = notice
