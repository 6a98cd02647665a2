"""Every `WAKEFUL_*` name wakeful reads, so a misspelled one is warned about instead of being
silently ignored (a typo in WAKEFUL_OUTBOX_GAP would otherwise leave the default in force).

A test reads the source tree and fails when a name read anywhere is missing here.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

KNOWN = frozenset(
    {
        # bot/process/config.py: Slack, the store, the HTTP front, the engine's tunables
        "WAKEFUL_DB",
        "WAKEFUL_HOST",
        "WAKEFUL_PORT",
        "WAKEFUL_APPROVERS",
        "WAKEFUL_SELF_APPROVAL",
        "WAKEFUL_AGENT",
        "WAKEFUL_SQLITE_MAX_PAGES",
        "WAKEFUL_BATCH_WINDOW",
        "WAKEFUL_STARTUP_WAIT",
        "WAKEFUL_PG_POOL",
        "WAKEFUL_MODEL",
        "WAKEFUL_METRICS_PORT",
        "WAKEFUL_LOG_FORMAT",
        "WAKEFUL_LOG_LEVEL",
        "WAKEFUL_QUIET_DIGESTS",
        "WAKEFUL_MIN_DIGEST_PERIOD",
        "WAKEFUL_FAILURE_TEXT",
        "WAKEFUL_OPS_CHANNEL",
        "WAKEFUL_ASSISTANT",
        "WAKEFUL_WORKSPACE_LABELS",
        "WAKEFUL_TOKEN_REFRESH_BEFORE",
        "WAKEFUL_TOKEN_KEY",
        "WAKEFUL_WEBHOOK_TEAM",
        "WAKEFUL_OUTBOX_GAP",
        "WAKEFUL_LEASE_TTL",
        "WAKEFUL_HEARTBEAT",
        "WAKEFUL_MAX_ATTEMPTS",
        "WAKEFUL_APPROVAL_TTL",
        "WAKEFUL_MAX_APPROVALS_PER_RUN",
        "WAKEFUL_MAX_OPEN_APPROVALS",
        "WAKEFUL_MAX_TIMERS_PER_INBOX",
        "WAKEFUL_SEND_TIMEOUT",
        "WAKEFUL_BACKOFF_BASE",
        "WAKEFUL_BACKOFF_CAP",
        "WAKEFUL_TOOL_RETRY_FOR",
        "WAKEFUL_STREAM_SEGMENT",
        "WAKEFUL_MEMORY_DOC_BYTES",
        "WAKEFUL_MEMORY_DOCS",
        "WAKEFUL_RETENTION",
        # tracing (core/tracing.py)
        "WAKEFUL_OTEL_CONTENT",
        # webhooks (WAKEFUL_WEBHOOK_CHANNEL_<NAME> is checked by config itself)
        "WAKEFUL_WEBHOOKS",
        "WAKEFUL_WEBHOOK_CHANNEL",
        "WAKEFUL_GITHUB_WEBHOOK_SECRET",
        "WAKEFUL_STRIPE_WEBHOOK_SECRET",
        # agents (bot/process/loading.py, bot/builtin/)
        "WAKEFUL_AGENT_PATH",
        "WAKEFUL_REFUNDS",
        "WAKEFUL_STRIPE_DESTINATION",
        "WAKEFUL_CLAUDE_CACHE_TTL",
        "WAKEFUL_CLAUDE_PRICES",
        "WAKEFUL_CLAUDE_MAX_TOOL_CALLS_PER_TURN",
        "WAKEFUL_CLAUDE_BUDGET_PER_PERSON_DAY",
        "WAKEFUL_CLAUDE_BUDGET_PER_WORKSPACE_DAY",
        # the credential gateway (bot/gateway/child.py, core/gateway/)
        "WAKEFUL_GATEWAY",
        "WAKEFUL_GATEWAY_CONFIG",
        "WAKEFUL_GATEWAY_URL",
        "WAKEFUL_GATEWAY_TOKEN",
        "WAKEFUL_GATEWAY_CHILD_PID",
    }
)
PREFIX = "WAKEFUL_"
NO_CLOSE = " (no known setting is close; see docs/settings.md)"
IGNORED_PREFIXES = ("WAKEFUL_TEST_", "WAKEFUL_WEBHOOK_CHANNEL_")
"""Names not checked here: the test suite's own, and the per-webhook report channels (config
refuses one that names no webhook)."""


def unknown_settings(env: Mapping[str, str], also: frozenset[str] = frozenset()) -> list[str]:
    """One warning per `WAKEFUL_*` name in `env` that wakeful does not read, naming the
    closest known name when there is one. `also`: names this environment uses for something
    else on purpose (the gateway's secret variables, which its TOML file names)."""
    known = KNOWN | also
    # compared without the common prefix, which would make every name look alike
    tails = {name.removeprefix(PREFIX): name for name in sorted(known)}
    out = []
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in known or name.startswith(IGNORED_PREFIXES):
            continue
        close = difflib.get_close_matches(name.removeprefix(PREFIX), tails, n=1, cutoff=0.6)
        hint = f"; did you mean {tails[close[0]]}?" if close else NO_CLOSE
        out.append(f"unknown setting {name} ignored{hint}")
    return out


def gateway_names(env: Mapping[str, str]) -> frozenset[str]:
    """The variables the credential gateway's TOML file (WAKEFUL_GATEWAY_CONFIG) names as its
    secrets' sources: a user may give one the wakeful prefix, and it is then no typo."""
    config = env.get("WAKEFUL_GATEWAY_CONFIG", "").strip()
    if not config:
        return frozenset()
    from wakeful.core.errors import WakefulError
    from wakeful.core.gateway.config import secret_variables

    try:
        return frozenset(secret_variables(config))
    except WakefulError:
        return frozenset()  # the gateway says what is wrong with its file when it starts
