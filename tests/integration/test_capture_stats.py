"""Captures and authorisations in `recon stats` and the metrics endpoint, on both databases: captures and cancels
counted by kind and status, the captures in flight, and the money authorised and not captured."""

from __future__ import annotations

import json

from recon.db.database import Database
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.modification_rows import ModificationSource, ModificationTransition, NewModification
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.test_metrics import served_samples

P = PaymentStatus


def workload(db: Database) -> None:
    """Three authorised payments of 40.00, 25.00 and 10.00 EUR: a capture of 30.00 in flight on the first, a
    cancel succeeded on the third (now failed), nothing asked of the second."""
    store = PaymentStore(db)
    ids = store.create([NewPayment("shop", f"auth-{i}", amount, "EUR", "stripe", capture_mode="manual")
                        for i, amount in enumerate((4000, 2500, 1000))], charge=False)
    with db.begin() as conn:
        for pid in ids:
            assert store.apply(conn, Transition(pid, P.CREATED, P.AUTHORISED, EventSource.CHARGE,
                                                psp_reference=f"pi_{pid}"))
    mods = ModificationStore(db)
    flying = mods.create(NewModification(ids[0], "capture", "auth-0-capture1", "ann", amount=3000), queue="charges")
    cancel = mods.create(NewModification(ids[2], "cancel", "auth-2-cancel1", "ann"), queue="charges")
    with db.begin() as conn:
        assert mods.apply(conn, ModificationTransition(flying, P.CREATED, P.PENDING, ModificationSource.MODIFICATION))
        assert mods.apply(conn, ModificationTransition(cancel, P.CREATED, P.SUCCEEDED, ModificationSource.MODIFICATION))


def test_stats__captures_in_flight_and_money_authorised_not_captured(db: Database, db_url: str,
                                                                     recon: Runner) -> None:
    workload(db)
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    captures = doc["payments"]["captures"]
    assert captures["by_status"] == {"cancel succeeded": 1, "capture pending": 1}
    assert captures["in_flight"] == {"EUR": 3000}
    assert (captures["authorised"], captures["authorised_payments"]) == ({"EUR": 6500}, 2)
    text = recon("stats", db_url=db_url).stdout
    assert ("captures and cancels: cancel succeeded 1, capture pending 1; captures in flight: 30.00 EUR; "
            "authorised, not captured: 65.00 EUR (2 payments)") in text


def test_metrics__captures_and_authorised_money(db: Database) -> None:
    workload(db)
    samples = served_samples(db)
    assert samples[("recon_modifications", (("currency", "EUR"), ("kind", "capture"), ("status", "pending")))] == 1
    assert samples[("recon_captures_in_flight_minor_units", (("currency", "EUR"),))] == 3000
    assert samples[("recon_authorised_not_captured_minor_units", (("currency", "EUR"),))] == 6500
