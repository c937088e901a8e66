from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import Runner

#: psp -> the wire the sandbox line names, and how the sweep line says it learns the truth
WIRES = {
    "sandbox": ("PSP sandbox on http://127.0.0.1:", "sweep asks the PSP for each payment"),
    "stripe": ("PSP sandbox speaking Stripe's API on http://127.0.0.1:",
               "sweep reads each PaymentIntent by id, and searches metadata['merchant_reference'] for those "
               "without one ("),
    "adyen": ("PSP sandbox speaking Adyen's Checkout v72 API and reports on http://127.0.0.1:",
              "sweep reads its merchant account's Payment accounting report of today as the report user"),
}
#: a demo of 60 payments takes about 7 s on a quiet machine, 25 s on a loaded one: this only catches a hang
HANG_SECONDS = 300


@pytest.mark.parametrize("psp", list(WIRES))
def test_demo__tells_the_story_and_proves_no_double_charge(tmp_path: Path, psp: str, recon: Runner) -> None:
    """The README's first command, smaller, on each wire: charges under faults, a sweep that heals, the
    sandbox's proof that no payment was charged twice (all its key generations together). Its outcome only:
    how fast it runs is no unit test's business on a shared machine (the timeout only catches a hang)."""
    command = ["demo", "--psp", psp, "--payments", "60", "--dir", str(tmp_path)]
    r = subprocess.run([sys.executable, "-m", "recon", *command], capture_output=True, text=True,
                       timeout=HANG_SECONDS, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    wire, lookup = WIRES[psp]
    assert lines[0].startswith(wire)
    created = next(line for line in lines if line.startswith("created 60 payments"))
    if psp != "sandbox":
        assert f"{psp}.check_charge accepts all" in created
    assert any(line.startswith("charge workers: ") for line in lines)
    checked = next(line for line in lines if line.startswith("sweep checked"))
    if not checked.startswith("sweep checked 0:"):
        assert any(line.startswith(lookup) for line in lines)
    saved = [line for line in lines if "saved under their idempotency key" in line]
    assert not saved or psp == "stripe"  # only Stripe saves a 500 under the key
    assert any(f"PSP calls to {psp}: " in line for line in lines)
    proof = next(line for line in lines if line.startswith("sandbox ledger: "))
    assert re.search(r"most charges for one key: 1, for one payment \(all its key generations\): 1 "
                     r"-> no double charge$", proof), proof
    final = next(line for line in lines if line.startswith("final: "))
    assert "pending" not in final and "processing" not in final
    assert "INFO recon.engine" not in r.stderr  # the story is the output
    assert (tmp_path / "recon.db").exists() and (tmp_path / "psp-sandbox.db").exists()
    hooks = [line for line in lines if line.startswith("webhooks: ")]
    if psp == "sandbox":
        assert not hooks  # the native sandbox pushes nothing
    else:  # the sandbox signed its PSP's webhooks; recon's endpoint verified and stored each once and applied them
        assert "its webhooks go to recon's endpoint http://127.0.0.1:" in lines[0]
        [hook] = hooks
        received = int(hook.split()[1])
        assert received >= 60 and "applied" in hook, hook
        # the PSPs that pay out: payouts fetched, the bank's statements imported, every payout matched
        [closed] = [line for line in lines if line.startswith("payouts: ")]
        assert re.search(r"paid out (\d+) payouts .*: \1 payouts matched to the bank: day closed \(", closed), closed
    command = f"recon --database-url sqlite:///{tmp_path / 'recon.db'} console"
    assert lines[-1].startswith(f"see what happened in the console: {command} ")
    stats = recon("stats", "--json", db_url=f"sqlite:///{tmp_path / 'recon.db'}", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    [sweep] = json.loads(stats.stdout)["sweeps"]  # what the console's overview shows as the last sweep
    assert sweep["outcome"] == "finished" and sweep["summary"]["checked"] == int(checked.split()[2].rstrip(":"))


def test_demo__the_proof_counts_every_key_generation_of_a_payment() -> None:
    """``KEY-gN`` keys belong to the payment whose key is KEY: two charges across generations are a double
    charge even though no single key was charged twice; a key of no payment is unaccounted for."""
    from recon.demo import _charges_per_payment

    owner = {"recon-aa": 1, "recon-bb": 2}
    assert _charges_per_payment({"per_key": {"recon-aa": 1, "recon-bb-g1": 1}}, owner) == (1, 0)
    assert _charges_per_payment({"per_key": {"recon-aa": 1, "recon-aa-g2": 1}}, owner) == (2, 0)
    assert _charges_per_payment({"per_key": {"recon-cc": 1}, "without_key": 2}, owner) == (0, 3)
