"""The Promela model of recon's lease protocol (verification/recon.pml), checked by Spin.

One test per model instance of ``verification/spin_check.py``: the fenced protocol verifies properties 1-4 (at
most one end per attempt, payment writes fenced, no lease held for ever under weak fairness, one idempotency
key charged); the chaos suite's planted bug (a finish guarded by the job id only) and two mutants produce
counterexamples; the refund model verifies properties 6-8 and the capture model 9-14 (captures within the
authorisation, the claim exact, never a capture and a cancel both succeeded, refunds within what was captured,
every capture and cancel ending final or in review, "never reached the PSP" true), and each has a mutant or a
dropped assumption that breaks each property; and the instances that document where the model and the code's own
claims disagree (see docs/verification.md) end as recorded there. Skips when ``spin`` or a C compiler is missing
(.ci/run installs Spin). The whole module takes about 40 s of CPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

VERIFICATION = Path(__file__).resolve().parents[2] / "verification"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spin_check", VERIFICATION / "spin_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["spin_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


spin_check = _load()
_MISSING = spin_check.tools_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"Spin model check skipped: {_MISSING}")


#: what the counterexamples must tell (the lines their trails print; statuses: 1 created, 5 failed)
STORIES: dict[str, tuple[str, ...]] = {
    # refunds without the bound: both reserved, 3 units refunded of 2 captured
    "refunds-mutant-unbounded": ("refunded 3",),
    # a paused worker's stamped refund request lands after "never reached the PSP"
    "refunds-pause-outlives-grace": ("never reached the PSP", "lands after never reached: the PSP refunds it"),
    # captures without the claim's bound: both claimed, 3 units of 2
    "captures-mutant-unbounded": ("capture 1 of 2 asked for: 1", "capture 0 of 1 asked for: 1 (0: refused), claimed 3"),
    # a cancel claimed while the capture is live: the PSP captured and released
    "captures-mutant-not-one-live": ("cancel 2 asked for: 1", "(captured 2, released 1)"),
    # captured_amount left at the whole amount: a refund of 2 where the PSP captured 1
    "captures-mutant-captured-whole": ("refunded 2 of captured 2 (the PSP captured 1)",),
    # the crashed worker's lease is never rescued: its modification never ends
    "captures-mutant-no-watcher": ("w2 crashes holding the lease",),
    # a paused cancel request lands after "never reached the PSP", and a capture follows
    "captures-pause-outlives-grace": ("reconcile: modification 2 never reached the PSP",
                                      "the PSP keeps 1 (captured 0, released 1)", "(captured 2, released 1)"),
    # the finding: the heal decided on a read, a replayed job stamps and sends, its job dies, the heal commits
    "finding-modification-heal-replay": ("reconcile reads modification 1: 2, not found",
                                         "an operator replays modification 1's dead job",
                                         "w1 stamps modification 1 (attempt 3) and sends it",
                                         "reconcile: modification 1 never reached the PSP (the PSP holds 0)",
                                         "the PSP keeps 1 (captured 2, released 0)"),
    # the finding: a partial capture (1 of 2), review and back: captured_amount 2, a refund of 2 reserved
    "finding-review-roundtrip": ("claimed 2, captured 1", "resolved by hand: succeeded, captured 2",
                                 "refunded 2 of captured 2 (the PSP captured 1)"),
    # the planted bug: the watcher ended the attempt, and its worker still finishes it, writing the payment
    "unfenced": ("the watcher rescues job 0 attempt 2", "finishes job 0 attempt 2: outcome 1, write 1"),
    # the disagreement: a replayed charge reads "created", the heal to failed commits, the charge goes out
    "finding-mark-processing": ("reconcile heal, statement 2: charge job unfinished 0",
                                "an operator replays the dead charge job", "_mark_processing: the payment is now 5",
                                "sends the charge with key generation 0"),
}


@pytest.mark.parametrize("instance", spin_check.INSTANCES, ids=[i.name for i in spin_check.INSTANCES])
def test_model_instance(instance: object, tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    results = spin_check.run_instance(instance, spin_check.Builder(tmp_path))
    for fragment in STORIES.get(instance.name, ()):  # type: ignore[attr-defined]
        story = "\n".join(results[0].story)
        assert fragment in story, f"{fragment!r} not in the counterexample:\n{story}"
    problems = []
    for result in results:
        print(result.line())
        record_property("spin", result.line())
        if result.story:
            print("  counterexample:\n    " + "\n    ".join(result.story))
        if not result.ok:
            problems.append(f"{result.line()}\n{result.output[-3000:]}")
        if result.claim.expect_ok:
            assert "errors: 0" in result.output
        else:
            assert result.errors > 0 and result.trail is not None and result.story, result.output[-3000:]
    assert not problems, "\n\n".join(problems)
