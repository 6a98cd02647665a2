"""Model spend: what an inbox's and its workspace's model calls cost since a time, summed from
the run log (each run logs its estimated cost and its inbox's workspace with its finish), over
an index of the runs that cost anything. Spend budgets read it before each model call."""

from __future__ import annotations

from wakeful.core.inbox_id import InboxId
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import require
from wakeful.core.usage import ModelSpend


class Spend(StoreBase):
    def model_spend(self, inbox: str, since: int) -> ModelSpend:
        """The estimated cost of the model calls of the runs of `inbox`, and of every inbox of
        its workspace, logged at `since` or later (runs still in flight are not logged yet)."""
        require(inbox=inbox)
        team = InboxId(inbox).team
        with self._tx(write=False) as tx:
            own = tx.one("inbox_model_spend", {"inbox": inbox, "since": since})
            ws = (
                None if team is None else tx.one("team_model_spend", {"team": team, "since": since})
            )
        return ModelSpend(
            inbox=float(own["spent"]) if own else 0.0,
            workspace=None if team is None else float(ws["spent"]) if ws else 0.0,
        )
