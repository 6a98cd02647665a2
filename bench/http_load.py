"""An open-loop load process: signed Events API requests at a fixed rate.

Each request has a scheduled send time (start + i / rate); its latency is measured from that
time, not from when a thread got round to sending it, so a stalled server cannot hide its queue
(no coordinated omission). Prints one JSON line with the figures.

Several `--url`s are loaded at once, interleaved: each gets `rate` requests a second, the
schedules offset so their requests alternate, and the figures come per url (`by_url`), so
servers compared are measured under the same load of the same moment.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import sys
import threading
import time
import uuid
from urllib.parse import urlparse


def signed(secret: str, body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    sig = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={sig}",
    }


def body_for(i: int, run: str, users: int = 1000) -> bytes:
    user = f"U{i % users:04d}"
    envelope = {
        "token": "t",
        "team_id": "TLOAD",
        "api_app_id": "ALOAD",
        "type": "event_callback",
        "event_id": f"Ev{run}{i:08d}",
        "event_time": int(time.time()),
        "event": {
            "type": "message",
            "channel_type": "im",
            "channel": f"D{user}",
            "user": user,
            "text": f"load {i}",
            "ts": f"{time.time():.6f}",
        },
    }
    return json.dumps(envelope).encode()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True, action="append", help="repeat to interleave")
    p.add_argument("--secret", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--threads", type=int, default=64)
    p.add_argument("--users", type=int, default=1000, help="messages go round this many DMs")
    p.add_argument("--log", help="write each request's send time (wall clock) and answer")
    args = p.parse_args(argv)
    urls = [urlparse(u) for u in args.url]
    n = len(urls)
    total = int(args.rate * args.seconds) * n
    rate = args.rate * n  # request i goes to urls[i % n]
    run = uuid.uuid4().hex[:6]
    bodies = [body_for(i, run, args.users) for i in range(total)]
    latencies: list[float] = []
    per_url: list[list[float]] = [[] for _ in urls]
    per_status: list[dict[str, int]] = [{} for _ in urls]
    sent: list[tuple[int, float, float, str]] = []  # (i, wall-clock send time, latency, status)
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    counter = iter(range(total))
    start = time.perf_counter() + 0.5
    wall_start = time.time() + (start - time.perf_counter())

    def worker() -> None:
        conns: list[http.client.HTTPConnection | None] = [None] * n
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            k = i % n
            url, conn = urls[k], conns[k]
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
                conn.request("POST", url.path, bodies[i], signed(args.secret, bodies[i]))
                resp = conn.getresponse()
                resp.read()
                key = str(resp.status)
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                key = type(exc).__name__
                if conn is not None:
                    conn.close()
                conn = None
            conns[k] = conn
            done = time.perf_counter()
            with lock:
                latencies.append(done - due)
                per_url[k].append(done - due)
                statuses[key] = statuses.get(key, 0) + 1
                per_status[k][key] = per_status[k].get(key, 0) + 1
                if args.log:
                    sent.append((i, wall_start + i / rate, done - due, key))
        for conn in conns:
            if conn is not None:
                conn.close()

    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    latencies.sort()
    for values in per_url:
        values.sort()
    if args.log:
        with open(args.log, "w") as log:
            for i, at, latency, key in sorted(sent):
                user = f"U{i % args.users:04d}"
                log.write(
                    json.dumps({"i": i, "user": user, "at": at, "ack": latency, "status": key})
                )
                log.write("\n")

    def pct(q: float, values: list[float] = latencies) -> float:
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q / 100 * len(values)))] * 1000

    by_url = {
        u: {
            "requests": len(values),
            "statuses": per_status[k],
            "p50_ms": pct(50, values),
            "p99_ms": pct(99, values),
            "max_ms": values[-1] * 1000 if values else 0.0,
        }
        for k, (u, values) in enumerate(zip(args.url, per_url, strict=True))
    }
    print(
        json.dumps(
            {
                "target_rate": args.rate,
                "achieved_rate": total / elapsed / n,
                "requests": total,
                "statuses": statuses,
                "p50_ms": pct(50),
                "p99_ms": pct(99),
                "max_ms": latencies[-1] * 1000 if latencies else 0.0,
                "by_url": by_url,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
