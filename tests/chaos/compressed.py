"""``python -m tests.chaos.compressed ARGS`` runs ``recon ARGS`` on the chaos suite's time scale, for the runs
through the real Stripe and Adyen adapters (tests/chaos/test_chaos.py).

The chaos config compresses every duration recon lets one configure (leases of 2 s, a reconcile schedule of
seconds, a 2 s grace period). One it does not: the reconcile handler snoozes a payment whose charge job holds a
live lease for ``recon.reconcile.handler.CHARGE_BUSY_SNOOZE`` (30 s, a constant), and nothing wakes that job
when the charge ends (a sweep shares the snoozed job by its unique key). Under chaos that meeting is common
(hangs, killed and frozen workers hold leases), so a bounded run would mostly wait on it. Here it is one lease
TTL of the chaos config, so the reconcile job looks again once such a lease can have ended. Nothing else
changes, and nothing in the shipped package can be switched this way.
"""

from __future__ import annotations

import sys
from datetime import timedelta

#: the chaos config's ``[engine] lease_ttl_seconds`` (tests.chaos.harness.CONFIG)
CHARGE_BUSY_SNOOZE = timedelta(seconds=2)


def compress() -> None:
    from recon.reconcile import handler

    handler.CHARGE_BUSY_SNOOZE = CHARGE_BUSY_SNOOZE


if __name__ == "__main__":
    compress()
    from recon.cli import main

    main(sys.argv[1:])
