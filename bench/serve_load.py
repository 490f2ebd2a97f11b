#!/usr/bin/env python3
"""Load on qhx_serve: C concurrent clients x R requests each, streaming and not, with images,
some clients disconnecting mid-stream. Passes (exit 0) when every request was answered (200) or
refused with 503, the server did not crash, answers /health after, exits 0 on SIGTERM, and its
RSS after the load is within --rss-slack-mb (50) of before; prints p50/p95 latency per kind.

  python bench/serve_load.py -m MODEL [--bin build/bin] [--clients 8] [--requests 20]
  python bench/serve_load.py --quick -m MODEL     # the brief form CI runs (tests/python/test_serve.py)
  python bench/serve_load.py --url http://127.0.0.1:8080 [--api-key KEY]   # a server already running
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))
from serve_util import ServeProcess  # noqa: E402

KINDS = ("plain", "stream", "stream_disconnect", "image")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


class Load:
    def __init__(self, host: str, port: int, key: str | None, max_tokens: int, image_url: str):
        self.host, self.port, self.key = host, port, key
        self.max_tokens, self.image_url = max_tokens, image_url
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {k: [] for k in KINDS}
        self.status: dict[int, int] = {}
        self.failures: list[str] = []

    def body(self, kind: str, client: int, i: int) -> dict:
        content: object = f"Client {client}, question {i}: say something."
        if kind == "image":
            content = [{"type": "image_url", "image_url": {"url": self.image_url}},
                       {"type": "text", "text": f"Client {client}: what is this?"}]
        return {"messages": [{"role": "user", "content": content}], "max_tokens": self.max_tokens,
                "temperature": 0.7, "seed": client * 1000 + i, "stream": kind.startswith("stream"),
                "stream_options": {"include_usage": True} if kind.startswith("stream") else None}

    def one(self, kind: str, client: int, i: int) -> None:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(self.body(kind, client, i)), headers=headers)
            r = conn.getresponse()
            if r.status == 200 and kind.startswith("stream"):
                events = 0
                done = False
                for raw in r:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    events += 1
                    if kind == "stream_disconnect" and events >= 2:
                        break  # go away mid-stream: the server cancels the generation
                    if line == "data: [DONE]":
                        done = True
                        break
                    json.loads(line[6:])
                if kind == "stream" and not done:
                    raise RuntimeError(f"stream ended without [DONE] after {events} events")
            else:
                data = r.read()
                payload = json.loads(data)
                if r.status == 200:
                    if payload["object"] != "chat.completion" or "usage" not in payload:
                        raise RuntimeError(f"not a completion: {data[:200]!r}")
                elif r.status == 503:
                    if "error" not in payload or not r.getheader("Retry-After"):
                        raise RuntimeError(f"503 without error JSON or Retry-After: {data[:200]!r}")
                else:
                    raise RuntimeError(f"status {r.status}: {data[:300]!r}")
            with self.lock:
                self.status[r.status] = self.status.get(r.status, 0) + 1
                if r.status == 200:
                    self.latency[kind].append((time.monotonic() - t0) * 1000)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            with self.lock:
                self.failures.append(f"client {client} request {i} ({kind}): {type(e).__name__}: {e}")
        finally:
            conn.close()

    def client(self, client: int, requests: int) -> None:
        for i in range(requests):
            self.one(KINDS[(client + i) % len(KINDS)], client, i)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="manifest, bundle folder or checkpoint directory (starts qhx_serve)")
    ap.add_argument("--bin", default=str(REPO_ROOT / "build" / "bin"), help="where qhx_serve is")
    ap.add_argument("--url", help="a running server instead of starting one")
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-queue", type=int, default=16, help="the started server's --max-queue")
    ap.add_argument("--rss-slack-mb", type=float, default=50.0)
    ap.add_argument("--image", default=str(REPO_ROOT / "assets" / "sample.png"))
    ap.add_argument("--log-dir", help="where the started server's log goes (default: a temporary folder)")
    ap.add_argument("--quick", action="store_true", help="8 clients x 3 requests, 8 tokens, a queue of 4 (some 503s; CI)")
    a = ap.parse_args()
    if a.quick:
        a.clients, a.requests, a.max_tokens, a.max_queue = 8, 3, 8, 4
    if not a.url and not a.model:
        ap.error("give -m MODEL (to start qhx_serve) or --url")

    image_url = "data:image/png;base64," + base64.b64encode(Path(a.image).read_bytes()).decode()
    server = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
    else:
        log_dir = Path(a.log_dir) if a.log_dir else Path(tempfile.mkdtemp(prefix="serve_load_"))
        args = ["--max-queue", str(a.max_queue)]
        if a.api_key:
            args += ["--api-key", a.api_key]
        server = ServeProcess(Path(a.bin) / "qhx_serve", Path(a.model), args, log_dir)
        host, port = "127.0.0.1", server.port

    load = Load(host, port, a.api_key, a.max_tokens, image_url)
    for kind in ("plain", "image"):  # warm up: the first image encode and the allocator's pools
        load.one(kind, -1, 0)
    load.latency = {k: [] for k in KINDS}
    load.status.clear()
    time.sleep(0.5)
    rss_before = server.rss_mb() if server else None

    t0 = time.monotonic()
    threads = [threading.Thread(target=load.client, args=(c, a.requests)) for c in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0

    problems = list(load.failures)
    total = a.clients * a.requests
    answered = sum(load.status.values())
    if answered != total:
        problems.append(f"{total - answered} of {total} requests got no answer")
    rss_after = None
    if server:
        if server.proc.poll() is not None:
            problems.append(f"qhx_serve died with {server.proc.returncode}: {server.log()[-2000:]}")
        else:
            try:
                if server.health()["status"] != "ok":
                    problems.append("/health is not ok after the load")
            except Exception as e:  # noqa: BLE001
                problems.append(f"/health after the load: {e}")
            time.sleep(1.0)  # the cancelled generations end at their next token
            rss_after = server.rss_mb()
            if rss_after - rss_before > a.rss_slack_mb:
                problems.append(f"RSS grew by {rss_after - rss_before:.1f} MB (> {a.rss_slack_mb} MB)")

    print(f"{a.clients} clients x {a.requests} requests, max_tokens {a.max_tokens}: {wall:.1f} s; "
          f"statuses {dict(sorted(load.status.items()))}")
    every = [x for v in load.latency.values() for x in v]
    for kind in (*KINDS, "all"):
        v = every if kind == "all" else load.latency[kind]
        print(f"  {kind:18s} n={len(v):3d}  p50 {percentile(v, 50):8.1f} ms  p95 {percentile(v, 95):8.1f} ms"
              + (f"  mean {statistics.fmean(v):8.1f} ms" if v else ""))
    if rss_before is not None and rss_after is not None:
        print(f"  server RSS {rss_before:.1f} MB before, {rss_after:.1f} MB after ({rss_after - rss_before:+.1f} MB)")
    if server:
        rc = server.stop()
        if rc != 0:
            problems.append(f"qhx_serve exited with {rc} on SIGTERM: {server.log()[-2000:]}")
    for p in problems:
        print("FAIL:", p)
    print("serve_load: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
