"""recon's own free text naming a PSP's reference (a review reason, an event's message, a conflict's two sides)
keeps it exactly where that record stores it exactly, on both databases: a 16-digit Adyen pspReference that
passes the Luhn check (one in ten do) reads as itself in the stored reason, in ``recon payments show`` and on the
console's item page, while a card number beside it, or pasted into a reason of a payment whose reference is
Luhn-valid too, is still masked."""

from __future__ import annotations

import json

import sqlalchemy as sa

from recon.db import schema
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.redact import redact
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import console

P = PaymentStatus
CARD = "4111111111111111"  # the test Visa number


def luhn_ok(digits: str) -> bool:
    """The Luhn check, written here (not recon's): double every second digit from the right."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def luhn_complete(prefix: str) -> str:
    """``prefix`` with the one check digit that makes it Luhn-valid."""
    [full] = [prefix + str(d) for d in range(10) if luhn_ok(prefix + str(d))]
    return full


#: Adyen pspReferences: 16 digits, Luhn-valid (ours, and the other side of a conflict), and a refund's PSP id
REF = luhn_complete("883512345678901")
OTHER = luhn_complete("885123456789012")
REFUND_ID = luhn_complete("991234567890123")


def test_the_references_are_luhn_valid_and_masked_without_keep() -> None:
    assert len(REF) == len(OTHER) == 16 and luhn_ok(REF) and luhn_ok(OTHER) and luhn_ok(CARD)
    assert redact(f"the PSP reports {REF}: amount differs") == "the PSP reports [card]: amount differs"


def test_redact_keep__only_a_kept_identifier_as_a_whole_token() -> None:
    text = f"the PSP reports {REF}: amount differs, card {CARD}"
    assert redact(text, keep=(REF,)) == f"the PSP reports {REF}: amount differs, card [card]"
    assert redact(text, keep=(OTHER,)) == "the PSP reports [card]: amount differs, card [card]"  # not this record's
    assert redact(f"card {CARD}", keep=(REF, None, "")) == "card [card]"
    # a token that only holds the identifier is masked: a prefix, a joiner inside a longer token
    assert redact(f"ref-{REF}, x{REF}, {REF}.txt", keep=(REF,)) == "ref-[card], x[card], [card].txt"
    # quoted, in parentheses, at the end of a sentence: a whole token
    assert redact(f'"{REF}" ({REF}) {REF}.', keep=(REF,)) == f'"{REF}" ({REF}) {REF}.'
    # a kept identifier does not unmask a card number that is kept: a sentence is no identifier
    assert redact(f"card {CARD}", keep=(f"card {CARD}",)) == "card [card]"
    # keys are masked whatever is kept
    assert redact("sk_live_0123456789abcdef", keep=("sk_live_0123456789abcdef",)) == "[redacted]"


def _payment(db: Database, reference: str, psp_reference: str, capture_mode: str = "automatic") -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", reference, 5000, "EUR", "adyen", capture_mode=capture_mode)],
                         charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.PENDING, EventSource.CHARGE,
                                            psp_reference=psp_reference))
    return pid


def _stored(db: Database, pid: int) -> tuple[str | None, list[dict[str, object]]]:
    with db.begin() as conn:
        reason = conn.execute(sa.select(schema.payments.c.review_reason)
                              .where(schema.payments.c.id == pid)).scalar_one()
        rows = conn.execute(sa.select(schema.payment_events.c.details)
                            .where(schema.payment_events.c.payment_id == pid).order_by(schema.payment_events.c.id))
        details = [json.loads(d) if isinstance(d, str) else d for (d,) in rows]
    return reason, details


def seed(db: Database) -> tuple[int, int, int]:
    """order-k1: missing at the PSP (its reason names its stored reference, the transition does not carry it)
    with a card beside; order-k2: a reference conflict (both sides Luhn-valid) with an event message naming
    ours; order-k3: a reason with only a card number pasted in, its reference Luhn-valid too."""
    store = PaymentStore(db)
    missing, conflict, pasted = (_payment(db, "order-k1", REF), _payment(db, "order-k2", REF),
                                 _payment(db, "order-k3", REF))
    with db.begin() as conn:
        assert store.apply(conn, Transition(missing, P.PENDING, P.NEEDS_REVIEW, EventSource.RECONCILE,
                                            review_reason=f"missing_at_psp: PSP has no payment {REF} (card {CARD})"))
        assert store.apply(conn, Transition(
            conflict, P.PENDING, P.NEEDS_REVIEW, EventSource.RECONCILE,
            review_reason=f"reference_conflict: ours is {REF}, the PSP says Authorised about {OTHER} under our "
                          "reference (a second charge, or not ours: a person looks)",
            details={"psp_reference_conflict": {"ours": REF, "theirs": [OTHER]},
                     "message": f"the PSP reports {REF}: amount differs, card {CARD}"}))
        assert store.apply(conn, Transition(pasted, P.PENDING, P.NEEDS_REVIEW, EventSource.RECONCILE,
                                            review_reason=f"customer read out {CARD}"))
    return missing, conflict, pasted


#: the other side is no reference of this payment: masked in its reason, shown exactly in the event's evidence
CONFLICT_REASON = (f"reference_conflict: ours is {REF}, the PSP says Authorised about [card] under our reference "
                   "(a second charge, or not ours: a person looks)")


def test_stored__reasons_and_messages_keep_the_records_references_and_mask_the_card(db: Database) -> None:
    missing, conflict, pasted = seed(db)
    assert _stored(db, missing)[0] == f"missing_at_psp: PSP has no payment {REF} (card [card])"
    reason, details = _stored(db, conflict)
    assert reason == CONFLICT_REASON
    assert details[-1] == {"psp_reference_conflict": {"ours": REF, "theirs": [OTHER]},
                           "message": f"the PSP reports {REF}: amount differs, card [card]"}
    assert _stored(db, pasted)[0] == "customer read out [card]"


def test_stored__a_refunds_reason_keeps_its_psp_id(db: Database) -> None:
    pid = _payment(db, "order-k4", REF)
    with db.begin() as conn:
        assert PaymentStore(db).apply(conn, Transition(pid, P.PENDING, P.SUCCEEDED, EventSource.RECONCILE))
    [refund] = RefundStore(db).create([NewRefund(pid, "order-k4-r1", 1000, None, "ann")], queue="refunds")
    store = RefundStore(db)
    with db.begin() as conn:
        conn.execute(sa.update(schema.refunds).values(psp_refund_id=REFUND_ID, status="pending"))
        assert store.apply(conn, RefundTransition(refund, P.PENDING, P.NEEDS_REVIEW, RefundSource.RECONCILE,
                                                  review_reason=f"missing_at_psp: PSP has no refund {REFUND_ID}, "
                                                                f"card {CARD}"))
        got = conn.execute(sa.select(schema.refunds.c.review_reason)).scalar_one()
    assert got == f"missing_at_psp: PSP has no refund {REFUND_ID}, card [card]"


def test_payments_show__reason_and_event_line_show_the_reference(db: Database, db_url: str, recon: Runner) -> None:
    seed(db)
    out = recon("payments", "show", "order-k1", db_url=db_url)
    assert out.returncode == 0, out.stderr
    assert f"missing_at_psp: PSP has no payment {REF} (card [card])" in out.stdout and CARD not in out.stdout
    out = recon("payments", "show", "order-k2", db_url=db_url)
    assert out.returncode == 0, out.stderr
    # the events table folds a long cell onto lines of its column: the cell's text is its lines' pieces joined
    # (spaces dropped: a fold at a space loses it)
    cells = "".join(line.split("│")[-2].replace(" ", "") for line in out.stdout.splitlines() if line.count("│") > 3)
    assert f'"message":"thePSPreports{REF}:amountdiffers,card[card]"' in cells
    assert f'"ours":"{REF}"' in cells and OTHER in cells and "4111" not in out.stdout
    out = recon("payments", "show", "order-k3", db_url=db_url)
    assert "customer read out [card]" in out.stdout and "4111" not in out.stdout


def test_console__item_page_and_queue_show_the_reference(db: Database, db_url: str) -> None:
    seed(db)
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-k1").text
        assert f"missing at psp: PSP has no payment {REF} (card [card])" in page  # readable_reason's spelling
        assert "4111" not in page
        page = client.get("/payments/order-k2").text
        assert f"the PSP reports {REF}: amount differs, card [card]" in page
        assert f"ours: {REF}" in page and OTHER in page and "4111" not in page
        queue = client.get("/review").text
        assert f"PSP has no payment {REF} (card [card])" in queue and "customer read out [card]" in queue
        assert "4111" not in queue


#: an Adyen capture's pspReference (a modification's PSP id), Luhn-valid
MOD_ID = luhn_complete("771234567890123")


def _plant(db: Database, table: sa.Table, row_id: int, **values: object) -> None:
    """A row as an older recon (or a hand edit) left it: the output boundaries redact what the store would have."""
    with db.begin() as conn:
        conn.execute(sa.update(table).where(table.c.id == row_id).values(**values))


def test_outputs__every_other_place_a_reason_is_shown_keeps_its_records_identifier(db: Database, db_url: str,
                                                                                   recon: Runner) -> None:
    """The review queue's and the payments list's CSV exports, the bulk resolve preview, the payment page's failure
    reason and its captures table, and `recon payments show`'s refunds and captures tables: each reason shows its
    own record's PSP identifier exactly and masks a card number beside it (planted raw, past the store)."""
    from recon.db.modification_store import ModificationStore
    from recon.modification_rows import CAPTURE, NewModification

    missing, _conflict, _pasted = seed(db)
    failed = _payment(db, "order-k6", REF)
    with db.begin() as conn:
        assert PaymentStore(db).apply(conn, Transition(failed, P.PENDING, P.FAILED, EventSource.RECONCILE,
                                                       failure_reason="declined"))
    _plant(db, schema.payments, failed, failure_reason=f"declined: the PSP refused {REF} (card {CARD})")
    _plant(db, schema.payments, missing, review_reason=f"missing_at_psp: PSP has no payment {REF} (card {CARD})")
    captured = _payment(db, "order-k7", REF, capture_mode="manual")
    with db.begin() as conn:
        assert PaymentStore(db).apply(conn, Transition(captured, P.PENDING, P.AUTHORISED, EventSource.RECONCILE))
    mid = ModificationStore(db).create(NewModification(captured, CAPTURE, "order-k7-c1", "ann", amount=1000),
                                       queue="charges")
    _plant(db, schema.modifications, mid, psp_modification_id=MOD_ID, status="needs_review",
           review_reason=f"missing_at_psp: PSP has no capture {MOD_ID} (card {CARD})")
    refunded = _payment(db, "order-k8", REF)
    with db.begin() as conn:
        assert PaymentStore(db).apply(conn, Transition(refunded, P.PENDING, P.SUCCEEDED, EventSource.RECONCILE))
    [refund] = RefundStore(db).create([NewRefund(refunded, "order-k8-r1", 1000, None, "ann")], queue="refunds")
    _plant(db, schema.refunds, refund, psp_refund_id=REFUND_ID, status="needs_review",
           review_reason=f"missing_at_psp: PSP has no refund {REFUND_ID} (card {CARD})")

    with console(db_url, login="ann") as client:
        exported = client.get("/review?format=csv").text
        assert f"missing_at_psp: PSP has no payment {REF} (card [card])" in exported and "4111" not in exported
        listed = client.get("/payments?format=csv").text
        assert f"declined: the PSP refused {REF} (card [card])" in listed and "4111" not in listed
        preview = client.get("/review/bulk?as=failed&kind=missing_at_psp").text
        assert f"PSP has no payment {REF} (card [card])" in preview and "4111" not in preview
        page = client.get("/payments/order-k6").text
        assert f"declined: the PSP refused {REF} (card [card])" in page and "4111" not in page
        page = client.get("/payments/order-k7").text
        assert f"PSP has no capture {MOD_ID} (card [card])" in page and "4111" not in page

    def cells(out: str) -> str:  # the tables' last column ("why"), a folded cell's lines joined (spaces dropped)
        return "".join(line.split("│")[-2].replace(" ", "") for line in out.splitlines() if line.count("│") > 3)

    for reference, psp_id, kind in (("order-k7", MOD_ID, "capture"), ("order-k8", REFUND_ID, "refund")):
        out = recon("payments", "show", reference, db_url=db_url)
        assert out.returncode == 0, out.stderr
        assert f"missing_at_psp:PSPhasno{kind}{psp_id}(card[card])" in cells(out.stdout)
        assert "4111" not in out.stdout
