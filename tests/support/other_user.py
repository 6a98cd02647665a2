"""What a process of another local user can do to the gateway: run as uid/gid 65534 (nobody)
from a root test process, it reads a process's environment, opens a Unix socket, or sends a
refund to a gateway's port without the token, and says what happened. Unprivileged, the test
cannot switch users and is skipped with that reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

NOBODY = 65534
PROBE = r"""
import http.client, json, os, socket, sys
what = json.loads(sys.argv[1])
out = {"uid": os.getuid()}
for pid in what.get("pids", []):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            out[f"environ {pid}"] = "read" if f.read() else "empty"
    except OSError as exc:
        out[f"environ {pid}"] = type(exc).__name__
path = what.get("socket")
if path:
    os.stat(path)  # the socket is in sight: only its own mode can keep this user out
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = type(exc).__name__
if what.get("port"):
    conn = http.client.HTTPConnection("127.0.0.1", what["port"], timeout=10)
    headers = {"Content-Type": "application/x-www-form-urlencoded", **what.get("headers", {})}
    conn.request("POST", "/stripe/v1/refunds", body=b"payment_intent=pi_any", headers=headers)
    answer = conn.getresponse()
    out["status"] = answer.status
    out["mark"] = answer.getheader("Wakeful-Gateway")
    out["code"] = json.loads(answer.read())["error"]["code"]
print(json.dumps(out))
"""


def need_root() -> None:
    """Skip unless root, on a developer's machine; where WAKEFUL_TEST_REQUIRE_ROOT is set
    (`.ci/run` sets it) fail instead, so a CI run can never pass with these skipped."""
    if os.geteuid() != 0:
        message = "runs a process as another user (uid 65534): needs root to switch users"
        if os.environ.get("WAKEFUL_TEST_REQUIRE_ROOT"):
            pytest.fail(message + ", and WAKEFUL_TEST_REQUIRE_ROOT asks for it")
        pytest.skip(message)


def as_nobody(**what: Any) -> dict[str, Any]:
    """Run the probe as uid 65534 with `what` (pids, socket, port, headers); its findings."""
    need_root()
    for python in dict.fromkeys([sys.executable, shutil.which("python3", path="/usr/bin:/bin")]):
        if python is None:
            continue
        try:
            done = subprocess.run(
                [python, "-I", "-c", PROBE, json.dumps(what)],
                user=NOBODY,  # set after fork by C code: safe beside the test's threads
                group=NOBODY,
                extra_groups=[],
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
                capture_output=True,
                text=True,
                timeout=30,
            )
        except PermissionError:
            continue  # this interpreter lives where that user may not go (/root/.pyenv)
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        assert found["uid"] == NOBODY
        return found
    # As root the test must run: an interpreter nobody may run is a broken test machine, not
    # a reason to pass without checking who may use the gateway.
    pytest.fail("no Python interpreter that uid 65534 may run was found (/usr/bin/python3?)")
