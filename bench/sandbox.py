"""Throughput and latency of the sandbox PSP over real HTTP on 127.0.0.1.

Starts ``psp_adapters.sandbox.serve_forever`` in a child process (its own interpreter, as
``recon psp-sandbox`` would run), then drives it from ``--concurrency`` keep-alive connections: each iteration
creates a payment (a fresh Idempotency-Key, so every create is a SQLite write) and fetches it back. The run is
bounded by ``--requests`` and ``--max-seconds``. Prints one JSON line:

    {"bench": "sandbox", "requests": …, "requests_per_s": …, "p50_ms": …, "p99_ms": …, "passed": …}

``passed`` is true when requests_per_s >= ``--target`` (default 1000), no request failed and no key was
charged twice.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from exits import failed  # bench/exits.py (run as python bench/NAME.py)

ROOT = Path(__file__).resolve().parent.parent
# SIGTERM and SIGINT (which a background shell may have set to "ignore") end the child by KeyboardInterrupt
_CHILD = (
    "import signal, sys; from psp_adapters.sandbox import serve_forever; "
    "[signal.signal(s, signal.default_int_handler) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "serve_forever(sys.argv[1], port=0, on_ready_func=lambda url: print(url, flush=True))"
)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(Path(tmp, "sandbox.db"))],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            url = child.stdout.readline().strip()
            if not url.startswith("http://127.0.0.1:"):
                failed(f"sandbox did not start (got {url!r})")
            result = _drive(
                url, requests=args.requests, max_seconds=args.max_seconds, concurrency=args.concurrency
            )
            result["charges_max_per_key"] = int(str(_get(url, "/_admin/charges")["max_per_key"]))
        finally:
            _end(child)
    result["target_rps"] = args.target
    result["passed"] = (
        result["requests_per_s"] >= args.target
        and result["errors"] == 0
        and result["charges_max_per_key"] <= 1
    )
    print(json.dumps(result))
    return 0 if result["passed"] else 1


def _end(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    if child.stdout is not None:
        child.stdout.close()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="stop after this many requests")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="stop after this long")
    parser.add_argument("--concurrency", type=int, default=8, help="keep-alive connections")
    parser.add_argument("--target", type=float, default=1000.0, help="requests/s needed to pass")
    return parser.parse_args(argv)


def _drive(url: str, *, requests: int, max_seconds: float, concurrency: int) -> dict[str, Any]:
    host, port = urlsplit(url).hostname, urlsplit(url).port
    assert host == "127.0.0.1" and port is not None  # traffic to the local sandbox only
    tickets = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    start = time.perf_counter()
    deadline = start + max_seconds

    def worker(slot: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            while next(tickets) * 2 < requests and time.perf_counter() < deadline:
                ref = _timed(
                    conn, "POST", "/v1/payments", latencies[slot], errors, slot, key=uuid.uuid4().hex
                )
                if ref is not None:
                    _timed(conn, "GET", f"/v1/payments/{ref}", latencies[slot], errors, slot)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    samples = sorted(itertools.chain.from_iterable(latencies))
    return {
        "bench": "sandbox",
        "requests": len(samples),
        "errors": sum(errors),
        "seconds": round(elapsed, 3),
        "concurrency": concurrency,
        "requests_per_s": round(len(samples) / elapsed, 1),
        "p50_ms": round(_quantile(samples, 0.50) * 1000, 3),
        "p99_ms": round(_quantile(samples, 0.99) * 1000, 3),
    }


def _timed(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    sink: list[float],
    errors: list[int],
    slot: int,
    *,
    key: str | None = None,
) -> str | None:
    body = (
        json.dumps({"merchant_reference": f"bench-{key}", "amount": 1250, "currency": "EUR"}) if key else None
    )
    headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key else {})}
    began = time.perf_counter()
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    sink.append(time.perf_counter() - began)
    if response.status not in (200, 201):
        errors[slot] += 1
        return None
    return str(json.loads(payload)["psp_reference"])


def _get(url: str, path: str) -> dict[str, object]:
    split = urlsplit(url)
    conn = http.client.HTTPConnection(split.hostname or "127.0.0.1", split.port, timeout=10)
    try:
        conn.request("GET", path)
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def _quantile(samples: list[float], q: float) -> float:
    return samples[min(len(samples) - 1, int(q * len(samples)))] if samples else 0.0


if __name__ == "__main__":
    sys.exit(main())
