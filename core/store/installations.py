"""Installations of the app in many workspaces, the OAuth state values, and a workspace set
aside when its installation ends.

The store keeps what the edge hands it: the non-secret profile as JSON, the tokens already
encrypted (`secrets` is opaque here and is never logged or shown). A workspace is a team id,
or the enterprise id of an org-wide install, whose teams are recorded as they are seen.

When an installation ends (its tokens revoked, the app uninstalled) its workspace is set
aside in the same transaction: the outbox rows still waiting are parked with the reason, the
agent's timers are cancelled (approval expiries stay, so no approval stays open for ever), and
every inbox of the workspace is held by a lease that does not expire, so no run starts there;
its events, sessions and approvals are kept for the operator. A new installation of the
workspace lets those leases lapse in the transaction that saves it: its inboxes run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from wakeful.core.inbox_id import InboxId
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import require
from wakeful.core.store.sql import Row, Tx
from wakeful.core.tenancy import Workspace

Status = Literal["active", "revoked", "uninstalled"]
ASIDE_PREFIX = "aside:"
"""The holder of the lease that keeps an ended workspace's inbox from running."""
FOREVER = 2**62
"""The expiry of that lease: it lapses only when the workspace is installed again."""


@dataclass(frozen=True, slots=True)
class InstallationRow:
    """One workspace's installation as stored: `secrets` is the edge's ciphertext."""

    workspace: str
    enterprise_id: str | None
    team_id: str | None
    org_wide: bool
    profile: str
    secrets: str
    expires_at: int | None
    version: int = 0
    status: Status = "active"
    reason: str | None = None
    installed_at: int = 0
    updated_at: int = 0


@dataclass(frozen=True, slots=True)
class SetAside:
    """What ending an installation did: rows parked, timers cancelled, inboxes held."""

    parked: int
    cancelled: int
    inboxes: int


def workspace_key(enterprise_id: str | None, team_id: str | None, org_wide: bool) -> str:
    """The workspace an installation belongs to: the enterprise of an org-wide install, else
    the team (an enterprise's workspace-level install is its team's)."""
    key = enterprise_id if org_wide or not team_id else team_id
    if not key:
        raise ValueError("an installation needs a team id or an enterprise id")
    return key


def _row(r: Row | None) -> InstallationRow | None:
    if r is None:
        return None
    expires = r["expires_at"]
    return InstallationRow(
        workspace=str(r["workspace"]),
        enterprise_id=r["enterprise_id"],
        team_id=r["team_id"],
        org_wide=bool(r["org_wide"]),
        profile=str(r["profile"]),
        secrets=str(r["secrets"]),
        expires_at=None if expires is None else int(expires),
        version=int(r["version"]),
        status=r["status"],
        reason=r["reason"],
        installed_at=int(r["installed_at"]),
        updated_at=int(r["updated_at"]),
    )


class Installations(StoreBase):
    # -- installations ---------------------------------------------------------------------

    def save_installation(self, row: InstallationRow, now: int) -> int:
        """Store (or replace) a workspace's installation as active; its version. A workspace
        set aside by an earlier uninstall runs again from this commit on."""
        require(workspace=row.workspace)
        params = {
            "workspace": row.workspace,
            "enterprise_id": row.enterprise_id,
            "team_id": row.team_id,
            "org_wide": 1 if row.org_wide else 0,
            "profile": row.profile,
            "secrets": row.secrets,
            "expires_at": row.expires_at,
            "now": now,
        }
        with self._tx() as tx:
            saved = tx.one("save_installation", params)
            tx.run("resume_workspace", {"holder": ASIDE_PREFIX + row.workspace, "now": now})
        assert saved is not None
        return int(saved["version"])

    def installation(self, workspace: str) -> InstallationRow | None:
        """A workspace's installation (any status), or None if it was never installed."""
        with self._tx(write=False) as tx:
            return _row(tx.one("get_installation", {"workspace": workspace}))

    def installation_for_team(self, team: str) -> InstallationRow | None:
        """The installation a team's rows are sent with: its own, or its org-wide install's."""
        with self._tx(write=False) as tx:
            found = _row(tx.one("get_installation", {"workspace": team}))
            if found is None:
                found = _row(tx.one("team_installation", {"team_id": team}))
        return found

    def workspace_of(self, team: str) -> Workspace:
        """The workspace a team's records and queries belong to (core/tenancy.py): the team,
        or the org-wide installation it is under, with every team recorded under it."""
        require(team=team)
        with self._tx(write=False) as tx:
            row = _row(tx.one("get_installation", {"workspace": team}))
            if row is None:
                row = _row(tx.one("team_installation", {"team_id": team}))
            if row is None or not row.org_wide:
                return Workspace.of_team(team)
            teams = [
                str(r["team_id"]) for r in tx.all("workspace_teams", {"workspace": row.workspace})
            ]
        return Workspace(row.workspace, tuple(dict.fromkeys([row.workspace, team, *teams])))

    def installations(self) -> list[InstallationRow]:
        """Every installation, any status, by workspace."""
        with self._tx(write=False) as tx:
            return [r for r in map(_row, tx.all("list_installations")) if r is not None]

    def active_installations(self) -> int:
        """How many workspaces have the app installed now."""
        with self._tx(write=False) as tx:
            row = tx.one("count_installations")
        return int(row["n"]) if row else 0

    def note_team(self, team: str, workspace: str) -> None:
        """A team seen under an org-wide install: its people's rows go out with that install."""
        require(team=team, workspace=workspace)
        with self._tx() as tx:
            tx.run("note_team", {"team_id": team, "workspace": workspace})

    def refresh_secrets(
        self,
        workspace: str,
        version: int,
        secrets: str,
        profile: str,
        expires_at: int | None,
        now: int,
    ) -> int | None:
        """Write refreshed tokens over the `version` they were refreshed from; the new
        version, or None when another save came first (the caller reads again)."""
        params = {
            "workspace": workspace,
            "version": version,
            "secrets": secrets,
            "profile": profile,
            "expires_at": expires_at,
            "now": now,
        }
        with self._tx() as tx:
            if tx.run("refresh_secrets", params) != 1:
                return None
        return version + 1

    def end_installation(
        self,
        workspace: str,
        status: Status,
        reason: str,
        secrets: str,
        now: int,
        issued_at: int | None = None,
    ) -> SetAside | None:
        """The installation ended (`revoked` or `uninstalled`, in either order: uninstalled
        stands): its tokens are replaced by `secrets` (the edge's ciphertext of none) and its
        workspace set aside (see the module). None when the workspace was never installed, or
        was installed again after `issued_at` (when the notice was sent)."""
        require(workspace=workspace, reason=reason)
        if status not in ("revoked", "uninstalled"):
            raise ValueError(f"an installation ends revoked or uninstalled, not {status!r}")
        with self._tx() as tx:
            params = {
                "workspace": workspace,
                "status": status,
                "reason": reason[:500],
                "secrets": secrets,
                "now": now,
                "issued_at": now if issued_at is None else issued_at,
            }
            if tx.run("end_installation", params) != 1:
                return None
            teams = [workspace, *(str(r["team_id"]) for r in tx.all("workspace_teams", params))]
            return _set_aside(tx, workspace, teams, reason, now)

    # -- OAuth state -----------------------------------------------------------------------

    def issue_state(self, state: str, expires_at: int, now: int) -> None:
        """Keep an OAuth state value until `expires_at`; expired ones are dropped meanwhile."""
        require(state=state)
        with self._tx() as tx:
            tx.run("prune_oauth_states", {"now": now})
            tx.run("insert_oauth_state", {"state": state, "expires_at": expires_at})

    def consume_state(self, state: str, now: int) -> bool:
        """True once for a state issued and not expired: the value is gone after this call."""
        if not state:
            return False
        with self._tx() as tx:
            return tx.one("consume_oauth_state", {"state": state, "now": now}) is not None


def _set_aside(tx: Tx, workspace: str, teams: Sequence[str], reason: str, now: int) -> SetAside:
    parked = cancelled = held = 0
    error = f"not sent: {reason}"[:2000]
    for team in teams:
        head = InboxId.team_prefix(team)
        prefix = {"prefix": head, "n": len(head)}
        parked += tx.run("park_workspace_outbox", {**prefix, "error": error})
        cancelled += tx.run("cancel_workspace_timers", prefix)
        for r in tx.all("workspace_inboxes", prefix):
            params = {"inbox": r["inbox"], "holder": ASIDE_PREFIX + workspace, "until": FOREVER}
            held += tx.run("set_inbox_aside", params)
    return SetAside(parked, cancelled, held)
