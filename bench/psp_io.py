"""Threads or async I/O for PSP calls? Client CPU and memory per concurrent call, measured (issue 29).

A worker keeps ``rate x latency`` PSP calls in flight (100 requests/s at 200 ms: 20; at 2 s: 200). This holds C
calls in flight against the PSP sandbox (a child process answering every request after ``--latency-ms``) for
``--seconds``, in a fresh child process per model, and prints one JSON line per model and C:

    {"bench": "psp_io", "model": "threads"|"asyncio", "in_flight": C, "calls": …, "calls_per_s": …,
     "cpu_us_per_call": …, "peak_rss_mb": …, "rss_mb_per_in_flight": …}

- ``threads``: C threads sharing one ``httpx.Client`` (what recon's adapters and handler threads do);
- ``asyncio``: C tasks sharing one ``httpx.AsyncClient`` in one event loop.

``cpu_us_per_call`` is the client process's user + system CPU over the calls (its start-up apart); the
sandbox's CPU is the same for both. Bounded: every run stops after ``--seconds`` (default 5; ``--quick`` 2).

Usage: python bench/psp_io.py [--quick] [--in-flight 25,250] [--latency-ms 200] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from exits import failed  # bench/exits.py (run as python bench/NAME.py)

ROOT = Path(__file__).resolve().parent.parent
_SANDBOX = (
    "import json, signal, sys; from psp_adapters.sandbox import serve_forever; "
    "from psp_adapters.sandbox.faults import Faults; "
    "[signal.signal(s, signal.default_int_handler) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "serve_forever(sys.argv[1], port=0, on_ready_func=lambda url: print(url, flush=True), "
    "faults=Faults(latency_ms=int(sys.argv[2])))"
)
#: a read the sandbox answers (404) after its latency, with nothing written
PATH = "/v1/payments/psp_bench_absent"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", default="25,250", help="comma-separated concurrent calls")
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="2 s per run")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
               "load_average": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="bench-psp-io-") as tmp:
        sandbox = subprocess.Popen([sys.executable, "-c", _SANDBOX, str(Path(tmp, "s.db")), str(args.latency_ms)],
                                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                                   text=True)
        try:
            assert sandbox.stdout is not None
            url = sandbox.stdout.readline().strip()
            for c in (int(x) for x in args.in_flight.split(",")):
                for model in ("threads", "asyncio"):
                    out = subprocess.run([sys.executable, __file__, "_run", model, str(c), str(seconds), url],
                                         cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
                    if out.returncode != 0:
                        failed(out.stderr[-2000:])
                    doc = json.loads(out.stdout)
                    print(json.dumps({"bench": "psp_io", "model": model, "in_flight": c,
                                      "latency_ms": args.latency_ms, **doc, **machine}), flush=True)
        finally:
            sandbox.send_signal(signal.SIGTERM)
            try:
                sandbox.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sandbox.kill()
    return 0


def _run(model: str, c: int, seconds: float, url: str) -> None:
    import httpx

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0 = _cpu()
    started = time.perf_counter()
    deadline = started + seconds
    calls = [0]
    if model == "threads":
        client = httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_connections=c + 10))
        lock = threading.Lock()

        def loop() -> None:
            n = 0
            while time.perf_counter() < deadline:
                client.get(PATH)
                n += 1
            with lock:
                calls[0] += n

        threads = [threading.Thread(target=loop) for _ in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client.close()
    else:
        async def amain() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=30,
                                         limits=httpx.Limits(max_connections=c + 10)) as client:
                async def loop() -> None:
                    while time.perf_counter() < deadline:
                        await client.get(PATH)
                        calls[0] += 1

                await asyncio.gather(*(loop() for _ in range(c)))

        asyncio.run(amain())
    elapsed = time.perf_counter() - started
    cpu = _cpu() - cpu0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"calls": calls[0], "seconds": round(elapsed, 2), "calls_per_s": round(calls[0] / elapsed, 1),
                      "cpu_us_per_call": round(cpu / max(calls[0], 1) * 1e6, 1),
                      "peak_rss_mb": round(rss / 1024, 1),
                      "rss_mb_per_in_flight": round((rss - rss_before) / 1024 / c, 3)}))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_run":
        _run(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main())
