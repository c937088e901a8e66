"""Build and run Spin's verifier on ``recon.pml``: every check the test suite makes, one table.

``python verification/spin_check.py`` runs them all and prints the state-space statistics (exit 1 when a check
does not end as expected); ``tests/verification/test_protocol_model.py`` runs the same ``INSTANCES``, one test
each.
Standard library only: it needs ``spin`` and ``gcc`` on PATH (Debian: ``apt-get install spin gcc``).

An instance is the model with ``spin -D...`` switches (see the header of recon.pml), built once; each of its
claims is one ``ltl`` formula (every run also checks every ``assert`` the instance keeps) with what must come
out: ``errors: 0``, or a counterexample (errors > 0 and a trail file, replayed into the story that the model's
``printf`` lines tell).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MODEL = Path(__file__).resolve().parent / "recon.pml"
#: per build and per run (the whole table takes about 40 s of CPU)
TIMEOUT = 120.0


@dataclass(frozen=True)
class Claim:
    ltl: str  #: the ltl formula of recon.pml
    expect_ok: bool  #: True: errors 0; False: a counterexample
    liveness: bool = False  #: acceptance cycles under weak fairness (-a -f)


@dataclass(frozen=True)
class Instance:
    """One model instance (its ``spin -D`` switches), built once, and the claims checked on it."""

    name: str
    defines: tuple[str, ...]
    claims: tuple[Claim, ...]
    why: str
    optimise: bool = False  #: -O1 (big state spaces); else -O0, which builds in half the time
    nfair: int = 3  #: pan's -DNFAIR: weak fairness over up to 2**nfair + 2 processes (the never claim included)


FOUR = (Claim("one_end_per_attempt", True), Claim("writes_fenced", True),
        Claim("no_lease_forever", True, liveness=True), Claim("one_key_charged", True))
WIDE = ("-DREPLAY", "-DABOUND_CH=2")
#: the capture model's properties: the safety claims (each run also checks every assertion) and the liveness one
MOD_CLAIMS = (Claim("captures_within_authorisation", True), Claim("claims_exact", True),
              Claim("capture_or_cancel", True), Claim("refunds_within_captured", True),
              Claim("never_reached_modification_holds", True), Claim("modifications_end", True, liveness=True))

INSTANCES: tuple[Instance, ...] = (
    Instance("fenced", (), FOUR, optimise=True,
             why="the protocol as the code implements it: properties 1-4 (and every assertion) hold"),
    Instance("fenced+replay", WIDE, (Claim("one_end_per_attempt", True), Claim("never_reached_holds", False)),
             why="with dead-letter replay and a charge that dies first: the assertions of 1, 2, 4 hold; "
                 "property 5 fails through a paused worker's late request (the hazard recon/engine/watcher.py names)"),
    Instance("unfenced", ("-DUNFENCED", "-DASSERTS_OFF"),
             (Claim("one_end_per_attempt", False), Claim("writes_fenced", False)),
             why="the chaos suite's planted bug (finish by job id only): a stale finish ends an attempt twice "
                 "and commits its payment write"),
    Instance("mutant-owner-only", ("-DFENCE_OWNER_ONLY", "-DASSERTS_OFF"), (Claim("one_end_per_attempt", False),),
             why="the fence without its attempt number: two handler threads of one worker process"),
    Instance("mutant-no-watcher", ("-DNO_WATCHER",), (Claim("no_lease_forever", False, liveness=True),),
             why="without the stuck watcher a crashed worker's lease is held for ever"),
    Instance("pause-outlives-retention", ("-DPAUSE_OUTLIVES_RETENTION", "-DASSERTS_OFF"),
             (Claim("one_key_charged", False),),
             why="property 4 needs its timing assumption: no pause as long as the PSP's idempotency retention"),
    Instance("finding-mark-processing", (*WIDE, "-DSEND_UNDER_LEASE"), (Claim("never_reached_holds", False),),
             why="disagreement with the code's claim: _mark_processing ignores its CAS and charges a payment that "
                 "reconciliation healed to failed meanwhile (PostgreSQL READ COMMITTED)"),
    Instance("finding-mark-processing-fixed", (*WIDE, "-DSEND_UNDER_LEASE", "-DFIX_MARK_PROCESSING"),
             (Claim("never_reached_holds", True),), why="the same instance with _mark_processing honouring its CAS"),
    Instance("finding-mark-processing-sqlite", (*WIDE, "-DSEND_UNDER_LEASE", "-DSQLITE"),
             (Claim("never_reached_holds", True),),
             why="the same instance with every transaction serialised (SQLite): no counterexample"),
    Instance("finding-paused-send", (*WIDE, "-DFIX_MARK_PROCESSING"), (Claim("never_reached_holds", False),),
             why="finding 2 alone (the code's _mark_processing): a paused worker's stamped request lands after "
                 "'never reached the PSP', when the grace period counts from the payment's creation"),
    Instance("finding-paused-send-fixed", (*WIDE, "-DFIX_MARK_PROCESSING", "-DFIX_HEAL_AFTER_LAST_SEND"),
             (Claim("never_reached_holds", True),),
             why="the same instance with the grace counted from the last send's stamp (the reconcile handler's "
                 "max(created_at, updated_at)) and no pause longer than it: property 5 holds"),
    Instance("refunds", ("-DREFUNDS",),
             (Claim("refunds_within_capture", True), Claim("refunded_exact", True),
              Claim("never_reached_refund_holds", True)),
             why="two refunds of one payment racing on two workers, the watcher, reconciliation and a PSP that fails "
                 "a refund after it succeeded: properties 6-8 (and every assertion) hold"),
    Instance("refunds-mutant-unbounded", ("-DREFUNDS", "-DREFUND_UNBOUNDED", "-DASSERTS_OFF"),
             (Claim("refunds_within_capture", False),),
             why="a refund reserved without the conditional UPDATE's bound: more refunded than captured"),
    Instance("refunds-pause-outlives-grace", ("-DREFUNDS", "-DREFUND_PAUSE_OUTLIVES_GRACE", "-DASSERTS_OFF"),
             (Claim("never_reached_refund_holds", False),),
             why="property 8 needs its timing assumption: a paused worker's stamped request lands after 'never "
                 "reached the PSP' when a pause outlasts the grace period"),
    Instance("captures", ("-DCAPTURES",), MOD_CLAIMS, nfair=4,
             why="a capture of the whole authorisation (the PSP may capture less) and a cancel racing on two workers, "
                 "a crash, the watcher, the PSP's later word, reconciliation and a refund: properties 9-13 hold"),
    Instance("captures-two", ("-DCAPTURES", "-DTWO_CAPTURES"),
             (Claim("captures_within_authorisation", True), Claim("claims_exact", True),
              Claim("modifications_end", True, liveness=True)), nfair=4,
             why="the same with two captures (1 unit, and all 2) and no cancel: one claims, the other only after it "
                 "failed; properties 9, 10 and 13 (and every assertion) hold"),
    Instance("captures-mutant-unbounded", ("-DCAPTURES", "-DTWO_CAPTURES", "-DMOD_UNBOUNDED", "-DASSERTS_OFF"),
             (Claim("captures_within_authorisation", False),), nfair=4,
             why="a capture claimed without payment_claim_capture's bound: both captures go out, 3 units of 2"),
    Instance("captures-mutant-not-one-live", ("-DCAPTURES", "-DMOD_NOT_ONE_LIVE", "-DASSERTS_OFF"),
             (Claim("capture_or_cancel", False), Claim("claims_exact", False)), nfair=4,
             why="a cancel claimed while a capture is live (payment_claim_cancel without authorisation_claimed = 0): "
                 "both succeed"),
    Instance("captures-mutant-captured-whole", ("-DCAPTURES", "-DMOD_NO_SET_CAPTURED", "-DASSERTS_OFF"),
             (Claim("refunds_within_captured", False),), nfair=4,
             why="a capture's success without payment_set_captured (captured_amount = the whole amount): a refund "
                 "of more than the PSP captured"),
    Instance("captures-mutant-no-watcher", ("-DCAPTURES", "-DNO_WATCHER"),
             (Claim("modifications_end", False, liveness=True),), nfair=4,
             why="without the stuck watcher the crashed worker's capture or cancel never ends"),
    Instance("captures-pause-outlives-grace", ("-DCAPTURES", "-DMOD_PAUSE_OUTLIVES_GRACE", "-DASSERTS_OFF"),
             (Claim("capture_or_cancel", False), Claim("never_reached_modification_holds", False)), nfair=4,
             why="properties 11 and 14 need their timing assumption: a paused request lands after 'never reached the "
                 "PSP' (and after the cancel that followed)"),
    Instance("finding-review-roundtrip", ("-DCAPTURES", "-DREVIEW_ROUNDTRIP", "-DASSERTS_OFF"),
             (Claim("refunds_within_captured", False),), nfair=4,
             why="disagreement with the code: a partly captured payment resolved from review back to succeeded gets "
                 "captured_amount = amount (payment_transition_if_status), and a refund of more than was captured "
                 "is reserved"),
    Instance("finding-review-roundtrip-fixed", ("-DCAPTURES", "-DREVIEW_ROUNDTRIP", "-DFIX_REVIEW_KEEPS_CAPTURED"),
             (Claim("refunds_within_captured", True),), nfair=4,
             why="the same instance with the resolution keeping captured_amount: property 12 (and every assertion) "
                 "holds"),
    Instance("finding-modification-heal-replay", ("-DCAPTURES", "-DMOD_REPLAY", "-DASSERTS_OFF"),
             (Claim("never_reached_modification_holds", False),), nfair=4,
             why="disagreement with the code's claim: the reconcile job's 'never reached the PSP' compares the status "
                 "it read, not the send stamped since: a replayed job's request lands after the heal commits"),
    Instance("finding-modification-heal-replay-fixed",
             ("-DCAPTURES", "-DMOD_REPLAY", "-DFIX_HEAL_CAS_UPDATED_AT"),
             (Claim("never_reached_modification_holds", True),), nfair=4, optimise=True,
             why="the same instance with the heal's compare-and-set also on the updated_at it read: property 14 (and "
                 "every assertion) holds"),
)


@dataclass
class Result:
    instance: Instance
    claim: Claim
    errors: int
    states: int
    transitions: int
    depth: int
    seconds: float  #: pan's own elapsed time
    vector: int  #: state-vector bytes
    build_seconds: float
    trail: Path | None
    story: list[str] = field(default_factory=list)
    output: str = ""

    @property
    def ok(self) -> bool:
        if self.claim.expect_ok:
            return self.errors == 0
        return self.errors > 0 and self.trail is not None

    def line(self) -> str:
        verdict = "as expected" if self.ok else "UNEXPECTED"
        kind = "verified" if self.errors == 0 else "counterexample"
        name = f"{self.instance.name}/{self.claim.ltl}"
        return (f"{name:<50} {kind:<14} states stored {self.states:>9,}  transitions "
                f"{self.transitions:>10,}  depth {self.depth:>4}  pan {self.seconds:5.2f} s  build "
                f"{self.build_seconds:4.1f} s  ({verdict})")


def tools_missing() -> str | None:
    """Why the checks cannot run here, or None."""
    if shutil.which("spin") is None:
        return "spin is not on PATH (Debian: apt-get install spin; .ci/run installs it)"
    if compiler() is None:
        return "gcc is not on PATH (Spin preprocesses the model with it, and pan.c is C)"
    return None


def compiler() -> str | None:
    return shutil.which("gcc")


class Builder:
    """Generates and compiles one verifier per model instance, in a directory of its own, once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def build(self, instance: Instance) -> tuple[Path, float]:
        """``spin -a`` and the C compiler, in ``root/<instance>``; returns (directory, seconds)."""
        started = time.monotonic()
        work = self.root / instance.name
        work.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MODEL, work / MODEL.name)
        _run(["spin", *instance.defines, "-a", MODEL.name], work)
        cc = compiler()
        if cc is None:
            raise RuntimeError("no C compiler")
        # -DNFAIR=3: weak fairness over the charge model's 7 processes (the capture model has more: nfair=4)
        _run([cc, "-O1" if instance.optimise else "-O0", "-w", f"-DNFAIR={instance.nfair}", "-o", "pan", "pan.c"],
             work)
        return work, time.monotonic() - started


def run_instance(instance: Instance, builder: Builder) -> list[Result]:
    """Build the instance and check each of its claims."""
    work, build_seconds = builder.build(instance)
    return [run_claim(instance, claim, work, build_seconds if i == 0 else 0.0)
            for i, claim in enumerate(instance.claims)]


def run_claim(instance: Instance, claim: Claim, work: Path, build_seconds: float) -> Result:
    trail = work / f"{MODEL.name}.trail"
    trail.unlink(missing_ok=True)
    # -m: depth bound (never reached: every run reports its depth); -w21: 2M hash slots; -Q2: 2 minutes at most
    args = ["./pan", "-m100000", "-w21", "-Q2", "-N", claim.ltl]
    if claim.liveness:
        args += ["-a", "-f"]
    out = _run(args, work, check_rc=False)
    result = Result(instance=instance, claim=claim, errors=_num(r"errors: (\d+)", out),
                    states=_num(r"(\d+) states, stored", out), transitions=_num(r"(\d+) transitions", out),
                    depth=_num(r"depth reached (\d+)", out),
                    seconds=_float(r"elapsed time ([\d.e+]+) seconds", out), vector=_num(r"State-vector (\d+)", out),
                    build_seconds=build_seconds, trail=trail if trail.exists() else None, output=out)
    if result.trail is not None:
        # the trail names its claim; spin replays it and the model's printf lines tell the story
        replay = _run(["spin", *instance.defines, "-t", MODEL.name], work, check_rc=False, stdout_only=True)
        result.story = [line.strip() for line in replay.splitlines() if line.strip().startswith("|")]
    return result


def _run(cmd: Sequence[str], cwd: Path, *, check_rc: bool = True, stdout_only: bool = False) -> str:
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = proc.stdout if stdout_only else proc.stdout + proc.stderr
    if check_rc and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-4000:]}")
    return out


def _num(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else -1


def _float(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else -1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only the checks whose name contains one of these")
    parser.add_argument("--story", action="store_true", help="print each counterexample's story")
    opts = parser.parse_args(argv)
    missing = tools_missing()
    if missing:
        print(f"spin_check: {missing}", file=sys.stderr)
        return 2
    started = time.monotonic()
    bad = 0
    with tempfile.TemporaryDirectory(prefix="recon-spin-") as tmp:
        builder = Builder(Path(tmp))
        for instance in INSTANCES:
            if opts.names and not any(n in instance.name for n in opts.names):
                continue
            for result in run_instance(instance, builder):
                print(result.line(), flush=True)
                if opts.story and result.story:
                    print("    " + "\n    ".join(result.story))
                bad += not result.ok
    print(f"spin_check: {time.monotonic() - started:.1f} s in all, {bad} unexpected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
