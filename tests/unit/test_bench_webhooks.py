"""bench/webhooks.py never measures a different event in silence: without Stripe's canonical objects
(../shared/specs/stripe/fixtures3.json beside the checkout) it exits 2 naming the file, unless
``--event-shape minimal`` asks for the smaller event (docs/benchmarks.md, webhook intake, fifth pass)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "webhooks.py"
FIXTURES3 = ROOT / ".." / "shared" / "specs" / "stripe" / "fixtures3.json"


def _bench() -> ModuleType:
    if str(BENCH.parent) not in sys.path:  # its neighbours (bench/exits.py), as `python bench/webhooks.py` has them
        sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_webhooks_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _body(request: bytes) -> dict[str, object]:
    return json.loads(request.split(b"\r\n\r\n", 1)[1])  # type: ignore[no-any-return]


def test_without_the_fixtures_file_the_bench_exits_2_naming_it_before_any_setup(tmp_path: Path) -> None:
    # a copy of the bench with no ../shared beside its checkout (what a copy under /tmp is)
    copy = tmp_path / "checkout" / "bench" / "webhooks.py"
    copy.parent.mkdir(parents=True)
    shutil.copy(BENCH, copy)
    shutil.copy(BENCH.parent / "exits.py", copy.parent)
    # a database URL nothing listens on: the bench must stop before it would connect
    env = {"PATH": "/usr/bin:/bin", "RECON_BENCH_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:9/x"}
    done = subprocess.run([sys.executable, str(copy), "--events", "10"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"bench/webhooks.py: {tmp_path}/checkout/../shared/specs/stripe/fixtures3.json: ")
    assert "--event-shape minimal" in lines[0]


def test_the_minimal_shape_is_only_what_is_asked_for(tmp_path: Path) -> None:
    bench = _bench()
    with pytest.raises(bench.MissingFixtures, match=str(tmp_path / "fixtures3.json")):
        bench._canonical("fixtures3", tmp_path / "fixtures3.json")
    event, intent = bench._canonical("minimal", tmp_path / "fixtures3.json")
    assert event["object"] == "event" and intent["object"] == "payment_intent"
    assert "client_secret" not in intent


@pytest.mark.skipif(not FIXTURES3.is_file(), reason="../shared/specs/stripe/fixtures3.json not beside the checkout")
def test_the_default_event_is_stripes_canonical_payment_intent() -> None:
    bench = _bench()
    canonical = json.loads(FIXTURES3.read_text(encoding="utf-8"))["resources"]
    requests, dup = bench.build_requests("t", 3, 1, 0.0)
    assert dup == [False, False, False]
    body = _body(requests[0])
    intent = body["data"]["object"]  # type: ignore[index]
    # every field of Stripe's canonical PaymentIntent is there, the bench's own values over its
    assert set(canonical["payment_intent"]) <= set(intent)
    assert intent["id"] == "pi_t_0" and intent["status"] == "succeeded" and intent["amount"] == 1000
    assert body["type"] == "payment_intent.succeeded"
    minimal = _body(bench.build_requests("t", 1, 1, 0.0, "minimal")[0][0])
    assert len(json.dumps(minimal)) < 600 < 1_000 < len(json.dumps(body))


def test_bad_arguments_exit_2_in_one_line_before_any_setup(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "RECON_BENCH_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:9/x"}
    for args, says in ((["--events", "0"], "--events 1..200000"), (["--connections", "999"], "--connections 1..512")):
        done = subprocess.run([sys.executable, str(BENCH), *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and says in done.stderr and done.stdout == ""
    remote = {**env, "RECON_BENCH_DATABASE_URL": "postgresql+psycopg://postgres@db.example.com/x"}
    done = subprocess.run([sys.executable, str(BENCH), "--events", "10"], cwd=tmp_path, env=remote,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "only a loopback server is benchmarked (got db.example.com)" in done.stderr
