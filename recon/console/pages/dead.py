"""``/dead``: the dead-letter set with filters, a preview (a dry run of the replay) and the replay itself,
through ``recon.engine.replay``: the loop ``recon jobs replay`` runs. A refused replay (unconfirmed, a bad filter,
a role that does not allow it) answers with a redirect to the preview, which shows why beside its form."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

import click
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.classify import ErrorKind
from recon.console.csv_export import csv_response
from recon.console.web import Fields, FormAt, acting, action, done, page, pages, recon_app, refusal_of
from recon.engine.replay import ReplayRun, job_filter, replay
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.params import INT64_MAX, Since
from recon.rows import Job, JobFilter, Payment

log = logging.getLogger("recon.console")

#: dead jobs per page of the listing
PAGE_SIZE = 100
#: a preview lists at most this many jobs
PREVIEW_MAX = 500
FILTER_NAMES = ("queue", "kind", "error_kind", "since")
#: a CSV export holds at most this many dead jobs
CSV_MAX = 10_000
CSV_COLUMNS = ("job_id", "queue", "kind", "attempts", "max_attempts", "error_kind", "last_error", "finished_at",
               "payment", "amount_minor", "currency", "payment_status")


@dataclass(frozen=True, slots=True)
class DeadFilters:
    """The filters as typed (to put back in the forms) and as the store takes them."""

    typed: dict[str, str]
    since: timedelta | datetime | None

    def job_filter(self, request: Request) -> JobFilter:
        return job_filter(recon_app(request).jobs, queue=self.typed.get("queue") or None,
                          kind=self.typed.get("kind") or None, error_kind=self.typed.get("error_kind") or None,
                          since=self.since)


def read_filters(fields: Fields) -> DeadFilters:
    """The filters of a listing, a preview or a replay; UsageError names a bad one."""
    typed = {name: fields.text(name, max_length=200) or "" for name in FILTER_NAMES}
    since = None
    if typed["since"]:
        try:
            since = Since().convert(typed["since"], None, None)
        except click.BadParameter as exc:
            raise UsageError(f"since: {exc.message}") from None
    return DeadFilters(typed=typed, since=since)


def dead_page(request: Request) -> Response:
    fields = Fields(request.query_params)
    try:
        filters = read_filters(fields)
        after = _after(fields)
    except UsageError as exc:
        return _render(request, status=422, error=str(exc), typed=_typed(fields))
    if fields.raw("format") == "csv":
        return _csv(request, filters)
    found = recon_app(request).jobs.dead_letters.list_jobs_filtered(
        filters=filters.job_filter(request), state="dead", after_id=after, limit=PAGE_SIZE + 1)
    return _render(request, typed=filters.typed, jobs=found[:PAGE_SIZE],
                   next_after=found[PAGE_SIZE - 1].id if len(found) > PAGE_SIZE else None,
                   replayed=_ids(fields.raw("replayed")) if fields.raw("replayed") else None)


def preview(request: Request) -> Response:
    """What a replay of the filter would do, with its form; after a refused replay (``replay_at``) the refusal
    beside the form (or, when the filter itself is bad, beside the error that says why)."""
    fields = Fields(request.query_params)
    errors, _ = refusal_of(request)
    replay_error = errors.get("replay")
    try:
        filters = read_filters(fields)
    except UsageError as exc:
        return _render(request, status=422, error=str(exc), typed=_typed(fields), replay_error=replay_error)
    app = recon_app(request)
    budget = app.settings.engine.default_max_attempts
    run = replay(app.jobs, filters.job_filter(request), budget=budget, operator="preview", limit=PREVIEW_MAX + 1,
                 dry_run=True)
    return _render(request, typed=filters.typed, preview=run.jobs[:PREVIEW_MAX],
                   more=len(run.replayed) > PREVIEW_MAX, skipped=run.skipped, budget=budget, replay_error=replay_error)


def _csv(request: Request, filters: DeadFilters) -> Response:
    found = recon_app(request).jobs.dead_letters.list_jobs_filtered(
        filters=filters.job_filter(request), state="dead", after_id=0, limit=CSV_MAX)
    paid = payments_of(request, found)
    rows = []
    for j in found:
        p = paid.get(j.id)
        rows.append([j.id, j.queue, j.kind, j.attempts, j.max_attempts, j.last_error_kind, j.last_error,
                     j.finished_at.isoformat() if j.finished_at else None, p.merchant_reference if p else None,
                     p.amount if p else None, p.currency if p else None, str(p.status) if p else None])
    return csv_response("dead-letters.csv", CSV_COLUMNS, rows)


def payments_of(request: Request, jobs: list[Job]) -> dict[int, Payment]:
    """job id -> the payment its payload names (charge and reconcile jobs), read in one go."""
    wanted = {j.id: j.payload.get("payment_id") for j in jobs}
    ids = sorted({v for v in wanted.values() if isinstance(v, int) and not isinstance(v, bool)})
    found = {p.id: p for p in recon_app(request).payments.get_many(ids)} if ids else {}
    return {job_id: found[pid] for job_id, pid in wanted.items() if isinstance(pid, int) and pid in found}


def replay_at(request: Request, fields: Fields) -> FormAt:
    """The replay form is on the preview of its filter."""
    typed = {name: fields.raw(name)[:200] for name in FILTER_NAMES if fields.raw(name)}
    return FormAt("/dead/preview?" + urlencode(typed), "replay", "nothing replayed")


def replay_dead(request: Request, fields: Fields) -> Response:
    operator = acting(request, Role.OPERATOR)
    filters = read_filters(fields)
    if not fields.flag("confirm"):
        raise UsageError('tick "Yes, replay these jobs" to confirm')
    app = recon_app(request)
    budget = app.settings.engine.default_max_attempts
    asked = app.actions.replay(filters.job_filter(request), budget=budget, by=operator)
    if asked.approval is not None:  # above [four_eyes] replay_count or replay_amount
        return done(request, "/dead", f"a replay of {asked.approval.subject} needs four eyes; approval "
                    f"{asked.approval.id} waits for another approver (Approvals)")
    run = asked.run or ReplayRun(dry_run=False, budget=budget)
    final = _final(request, run.replayed)
    log.info("console: %d dead jobs replayed by %s", len(run.replayed), operator)
    notice = (f"replayed {len(run.replayed)} dead jobs with {budget} fresh attempts each, by {operator}"
              + (f"; {len(run.skipped)} left dead: an unfinished job holds their unique key" if run.skipped else "")
              + (f"; {final} of them are for payments already final (succeeded or failed): they will finish "
                 f"without calling the PSP or changing the payment" if final else ""))
    return done(request, "/dead", notice, replayed=",".join(str(i) for i in run.replayed[:200]))


def _final(request: Request, job_ids: list[int]) -> int:
    """How many of the jobs work on a payment already succeeded or failed."""
    jobs = [j for j in (recon_app(request).jobs.get(i) for i in job_ids[:PREVIEW_MAX]) if j is not None]
    return sum(1 for p in payments_of(request, jobs).values() if p.status in ("succeeded", "failed"))


def _ids(raw: str) -> list[int]:
    parts = raw.split(",")[:200]
    return [int(p) for p in parts if p.isascii() and p.isdigit() and len(p) < 19]


def _render(request: Request, *, status: int = 200, typed: dict[str, str], **context: object) -> Response:
    context = {"jobs": None, "next_after": None, "preview": None, "more": False, "skipped": [], "replayed": None,
               "budget": None, "error": None, "replay_error": None, **context}
    listed = [*(context["jobs"] or []), *(context["preview"] or [])]  # type: ignore[misc]
    return pages(request).render(request, "dead.html", status=status, filters=typed,
                                 error_kinds=[k.value for k in ErrorKind], payments=payments_of(request, listed),
                                 query=urlencode({k: v for k, v in typed.items() if v}), **context)


def _typed(fields: Fields) -> dict[str, str]:
    return {name: fields.raw(name)[:200] for name in FILTER_NAMES}


def _after(fields: Fields) -> int:
    raw = fields.raw("after").strip()
    if not raw:
        return 0
    if not (raw.isascii() and raw.isdigit()) or int(raw) > INT64_MAX:  # "²".isdigit(), which int() refuses
        raise UsageError(f"after: {raw!r} is not a job id")
    return int(raw)


ROUTES = [
    Route("/dead", page(dead_page), methods=["GET"]),
    Route("/dead/preview", page(preview), methods=["GET"]),
    Route("/dead/replay", action(replay_dead, at=replay_at), methods=["POST"]),
]
