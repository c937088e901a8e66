"""`recon payments …`, `recon review …` and `recon sweep` for people: payments, a payment's audit trail, the
review queue, the sweep's dry run and summary (printed through ``recon.render.output``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from recon.evidence import resolution_sentence
from recon.payments.money import format_amount
from recon.redact import PSP_IDENTIFIER_FIELDS, evidence_identifiers, identifier, kept_text
from recon.render.output import FoldTable, age_text, stdout_console, timestamp
from recon.rows import AttemptRecord, Job, Payment, PaymentEvent

#: a payment's texts recon writes about it, which name its PSP reference (``payment_detail``)
_REASONS = frozenset({"review_reason", "failure_reason"})


def payments_table(payments: Sequence[Payment]) -> None:
    table = FoldTable(title=f"{len(payments)} payments")
    for col in ("id", "reference", "account", "psp", "amount", "status", "created", "updated"):
        table.add_column(col, justify="right" if col in ("id", "amount") else "left")
    for p in payments:
        table.add_row(str(p.id), p.merchant_reference, p.merchant_account, p.psp,
                      format_amount(p.amount, p.currency), str(p.status), timestamp(p.created_at),
                      timestamp(p.updated_at))
    stdout_console().print(table)


def payment_detail(payment: Payment, events: Sequence[PaymentEvent],
                   jobs: Sequence[tuple[Job, Sequence[AttemptRecord]]] = ()) -> None:
    console = stdout_console()
    table = FoldTable("", "", show_header=False, title=f"payment {payment.merchant_reference}")
    for key, value in payment.to_dict().items():
        if key == "amount":
            value = f"{format_amount(payment.amount, payment.currency)} ({payment.amount} minor units)"
        if value is not None:
            table.add_row(key, identifier(value) if key in PSP_IDENTIFIER_FIELDS and isinstance(value, str)
                          else kept_text(value, (payment.psp_reference,)) if key in _REASONS and isinstance(value, str)
                          else str(value))
    console.print(table)
    history = FoldTable(title="events")
    for col in ("at", "from", "to", "source", "job", "attempt", "details"):
        history.add_column(col)
    for e in events:
        history.add_row(timestamp(e.at), e.from_status or "", e.to_status, e.source,
                        str(e.job_id) if e.job_id is not None else "",
                        str(e.attempt) if e.attempt is not None else "",
                        event_summary(e, width=160, keep=(payment.psp_reference,)))
    console.print(history)
    for job, attempts in jobs:
        console.print(f"job {job.id}: {job.kind} on {job.queue}, {job.state}, attempt {job.attempts}/"
                      f"{job.max_attempts}" + (f", last error {job.last_error_kind}: {job.last_error}"[:160]
                                                if job.last_error_kind else ""))
        for a in attempts:
            err = f" {a.error_kind}: {a.error}" if a.error_kind else ""
            console.print(f"  attempt {a.attempt} by {a.worker} at {timestamp(a.finished_at)}: {a.outcome}{err}"[:180])


def event_summary(event: PaymentEvent, *, width: int = 100, keep: tuple[str | None, ...] = ()) -> str:
    """One line for an audit event: a manual resolution in words (who, what, why, the PSP's answer, an
    override), other events' details as sorted JSON; at most ``width`` characters. Redacted here but for the
    PSP identifiers the event's details store exactly and ``keep`` (its payment's PSP reference), which it
    shows as they are (``recon.redact.kept_text``)."""
    d = event.details or {}
    keep = (*keep, *evidence_identifiers(d))
    if event.source == "manual" and "operator" in d:
        return kept_text(resolution_sentence(event.to_status, d)[:width], keep)
    return kept_text(json.dumps(d, sort_keys=True)[:width], keep) if d else ""


def review_table(items: Sequence[Any], *, now: datetime) -> None:
    """``recon review list``: recon.review.ReviewItem rows."""
    table = FoldTable(title=f"{len(items)} payments in review")
    for col in ("reference", "psp", "amount", "why", "severity", "in review", "due", "assignee", "PSP's latest answer"):
        table.add_column(col, justify="right" if col in ("amount", "in review") else "left")
    for item in items:
        p = item.payment
        answer = item.psp_answer or {}
        said = answer.get("psp_status") or answer.get("psp_outcome") or "-"
        if answer.get("psp_amount") is not None and answer.get("psp_currency"):
            said += f" {format_amount(answer['psp_amount'], str(answer['psp_currency']))}"
        if answer.get("evidence_due_by"):  # a dispute's: what to answer, by when
            said += f" (evidence due by {answer['evidence_due_by']})"
        due = "-" if item.due_at is None else f"overdue {age_text((now - item.due_at).total_seconds())}" \
            if item.overdue else f"in {age_text((item.due_at - now).total_seconds())}"
        table.add_row(p.merchant_reference, p.psp, format_amount(p.amount, p.currency), str(item.kind),
                      str(item.severity), age_text(item.age_seconds), due, p.review_assignee or "-", said)
    stdout_console().print(table)


def payout_exceptions_table(exceptions: Sequence[Any]) -> None:
    """``recon review list``: the close's open exceptions (recon.payout_rows.PayoutException), oldest first."""
    table = FoldTable(title=f"{len(exceptions)} open payout exceptions (recon payouts show PAYOUT / resolve ID)")
    for col in ("id", "kind", "payout", "bank entry", "since", "what"):
        table.add_column(col, justify="right" if col in ("id", "payout", "bank entry") else "left")
    for e in exceptions:
        table.add_row(str(e.id), e.kind.value, str(e.payout_id or "-"), str(e.entry_id or "-"),
                      timestamp(e.created_at), e.detail)
    stdout_console().print(table)


def sweep_dry_run(payments: Sequence[Any], *, modes: dict[str, str] | None = None) -> None:
    how = ", ".join(f"{psp} {mode}" for psp, mode in sorted((modes or {}).items()))
    table = FoldTable(title=f"dry run: would check {len(payments)} payments" + (f" (mode: {how})" if how else ""))
    for col in ("id", "reference", "psp", "amount", "status", "updated"):
        table.add_column(col)
    for p in payments[:50]:
        table.add_row(str(p.id), p.merchant_reference, p.psp, format_amount(p.amount, p.currency), str(p.status),
                      timestamp(p.updated_at))
    console = stdout_console()
    console.print(table)
    if len(payments) > 50:
        console.print(f"... and {len(payments) - 50} more")


def sweep_summary(doc: dict[str, Any]) -> None:
    console = stdout_console()
    console.print(f"checked {doc['checked']}: healed->succeeded {doc['healed_succeeded']}, "
                  f"healed->failed {doc['healed_failed']}, still pending {doc['still_pending']}, "
                  f"needs review {doc['needs_review']}, errors {doc['errors']}, dead {doc['dead']}")
    if "psp_calls" in doc:
        how = ", ".join(f"{psp} {mode}" for psp, mode in sorted(doc.get("mode", {}).items())) or "nothing to ask"
        by_psp = ", ".join(f"{psp} {n}" for psp, n in sorted(doc.get("psp_calls_by_psp", {}).items()))
        console.print(f"PSP calls {doc['psp_calls']}" + (f" ({by_psp})" if by_psp else "")
                      + f", 429s {doc.get('http_429', 0)}; mode: {how}; window jobs {doc.get('window_jobs', 0)}")
    refunds = doc.get("refunds") or {}
    if refunds.get("checked"):
        console.print(f"refunds checked {refunds['checked']}: succeeded {refunds['healed_succeeded']}, failed "
                      f"{refunds['healed_failed']}, still pending {refunds['still_pending']}, needs review "
                      f"{refunds['needs_review']}, errors {refunds['errors']}, dead {refunds['dead']}")
    captures = doc.get("captures") or {}
    if captures.get("checked"):
        console.print(f"captures and cancels checked {captures['checked']}: succeeded {captures['healed_succeeded']}, "
                      f"failed {captures['healed_failed']}, still pending {captures['still_pending']}, needs review "
                      f"{captures['needs_review']}, errors {captures['errors']}, dead {captures['dead']}")
    authorisations = doc.get("authorisations") or {}
    if authorisations.get("payments"):
        console.print(f"authorisations: {authorisations['expiring']} expiring, {authorisations['expired_checked']} "
                      "past their validity (asked the PSP)")
        for item in authorisations["payments"][:50]:
            console.print(f"  {item['payment']} ({item['psp']}, {format_amount(item['amount'], item['currency'])}): "
                          f"{item['reason']}", markup=False, highlight=False)
    disputes = doc.get("disputes") or {}
    for psp, got in sorted((disputes.get("fetched") or {}).items()):
        console.print(f"{psp} disputes read: {got['new']} new, {got['moved']} moved, {got['same']} unchanged, "
                      f"{len(got['unknown'])} of payments we do not know, {len(got['conflicts'])} under another "
                      "PSP reference")
    if disputes.get("open"):
        withdrawn = ", ".join(format_amount(v, k) for k, v in sorted(disputes["withdrawn"].items()))
        console.print(f"open disputes {disputes['open']} ({withdrawn} withdrawn), evidence due within "
                      f"{disputes['due_soon_days']} days: {disputes['due_soon']}")
    if doc["money_at_risk"]:
        table = FoldTable(title="money at risk (unfinished payments)")
        for col in ("currency", "age", "payments", "amount"):
            table.add_column(col)
        for row in doc["money_at_risk"]:
            table.add_row(row["currency"], row["age"], str(row["count"]), format_amount(row["amount"], row["currency"]))
        console.print(table)
