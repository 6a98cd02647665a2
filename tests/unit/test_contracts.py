"""Contracts mypy checks (issue 36): core/ and bot/ read no optional feature off an object by
a literal name (`getattr(obj, "name", ...)`), which mypy cannot check. A sender that paces its
posts, a hook that undoes what it showed, an agent's tools, failure text and surfaces are
declared in Protocols or read once, where the agent is loaded, into typed objects.

What is left is listed below, each with why no declared type can say it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("core", "bot")

ALLOWED: dict[tuple[str, str, str], str] = {
    # (file, object, attribute): why the attribute is looked up by name
    ("core/gateway/config.py", "os", "O_NOFOLLOW"): "os has it only on some platforms",
    ("core/logs.py", "record", "wakeful"): "a logging record's extra, set by the caller",
    ("core/store/sqlite.py", "self._ingests", "urgent"): "a threading.local slot",
    ("bot/slack/web_client.py", "self._local", "conn"): "a threading.local slot",
    ("core/tool_failures.py", "exc", "http_status"): "stripe's errors, read without stripe",
    ("core/tool_failures.py", "exc", "headers"): "stripe's errors, read without stripe",
    ("core/tool_failures.py", "exc", "user_message"): "stripe's errors, read without stripe",
    ("bot/builtin/stripe_refunds.py", "exc", "code"): "stripe's errors are untyped",
    ("bot/builtin/stripe_refunds.py", "self._last", "headers"): "a threading.local slot",
    ("bot/builtin/conversation.py", "block", "type"): "anthropic's content blocks, of any kind",
    ("bot/builtin/conversation.py", "block", "text"): "anthropic's content blocks, of any kind",
    ("bot/slack/sender.py", "exc.response", "status_code"): "slack_sdk's response, untyped",
    ("bot/slack/sender.py", "response", "status_code"): "slack_sdk's response, untyped",
    ("bot/slack/sender.py", "response", "headers"): "slack_sdk's response, untyped",
    ("bot/slack/sender.py", "response", "api_url"): "slack_sdk's response, untyped",
    ("bot/commands/cli.py", "args", "db_from_env"): "an argparse flag of some commands only",
    ("bot/commands/cli.py", "args", "parent"): "an argparse flag of some commands only",
    ("bot/commands/cli.py", "args", "with_env"): "an argparse flag of some commands only",
}


def literal_getattrs(source: str) -> list[tuple[str, str, int]]:
    """(object, attribute, line) of each `getattr(obj, "literal"[, default])` in `source`;
    a name held in a variable (a dataclass's fields, one by one) is not a literal."""
    found: list[tuple[str, str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
        ):
            continue
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            found.append((ast.unparse(node.args[0]), name.value, node.lineno))
    return found


def scanned() -> dict[tuple[str, str, str], list[int]]:
    """Every literal getattr of core/ and bot/: (file, object, attribute) -> lines."""
    uses: dict[tuple[str, str, str], list[int]] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for obj, attr, line in literal_getattrs(path.read_text()):
                uses.setdefault((where, obj, attr), []).append(line)
    return uses


def test_the_scan_finds_a_literal_getattr_and_passes_a_variable_one() -> None:
    source = (
        "x = getattr(self.sender, 'reserve', None)\n"
        "y = getattr(agent, 'tools')\n"
        "z = {f.name: getattr(agent, f.name) for f in fields(shape)}\n"
    )
    assert literal_getattrs(source) == [("self.sender", "reserve", 1), ("agent", "tools", 2)]


def test_a_look_up_issue_36_replaced_would_be_caught() -> None:
    """The getattr look-ups that became typed contracts, as they were: each one fails."""
    gone = {
        "core/dispatcher.py": "w = getattr(self.sender, 'workspace_of', None)\n"
        "r = getattr(self.sender, 'reserve', None)\n",
        "core/runner.py": "t = getattr(self.agent, 'failure_text', None)\n"
        "u = getattr(hook, 'failed', None)\n"
        "v = getattr(agent, 'tools', ())\n",
        "bot/slack/surfaces.py": "a = getattr(agent, 'suggested_prompts', ())\n"
        "b = getattr(self.agent, 'greeting', '')\n"
        "c = getattr(self.agent, 'thinking_status', False)\n"
        "d = getattr(self.agent, 'loading_messages', ())\n",
        "bot/process/loading.py": "e = getattr(exc, 'name', None)\n"
        "f = getattr(agent, 'run', None)\n"
        "g = getattr(agent, 'tools', ())\n",
        "core/worker.py": "h = getattr(self.clock, 'monotonic', None)\n"
        "i = getattr(self.clock, 'wall_ms', None)\n",
        "bot/front/listeners.py": "j = getattr(self.authorizer, 'note_org_team', None)\n",
    }
    for where, source in gone.items():
        uses = literal_getattrs(source)
        assert uses, where
        for obj, attr, _ in uses:
            assert (where, obj, attr) not in ALLOWED, f"{where}: {obj}.{attr} is allowed"


def test_core_and_bot_look_up_no_attribute_by_a_literal_name_but_the_allowed() -> None:
    uses = scanned()
    unexplained = [
        f"{where}:{lines[0]}: getattr({obj}, {attr!r})"
        for (where, obj, attr), lines in sorted(uses.items())
        if (where, obj, attr) not in ALLOWED
    ]
    assert not unexplained, (
        "declare it (a Protocol, a typed attribute read once) or, if no type can say it, "
        "add it to ALLOWED with why:\n" + "\n".join(unexplained)
    )


def test_every_allowed_look_up_is_still_there() -> None:
    """The list stays short: a look-up that went away leaves it."""
    uses = scanned()
    stale = [key for key in ALLOWED if key not in uses]
    assert not stale, f"no longer in the code, remove from ALLOWED: {stale}"
