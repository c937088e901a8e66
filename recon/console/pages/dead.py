"""``/dead``: the dead-letter set with filters, a preview (a dry run of the replay) and the replay itself,
through ``recon.engine.replay``: the loop ``recon jobs replay`` runs."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import click
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.classify import ErrorKind
from recon.console.web import Fields, acting, action, page, pages, recon_app
from recon.engine.replay import ReplayRun, job_filter, replay
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.params import INT64_MAX, Since
from recon.rows import JobFilter

log = logging.getLogger("recon.console")

#: dead jobs per page of the listing
PAGE_SIZE = 100
#: a preview lists at most this many jobs
PREVIEW_MAX = 500
FILTER_NAMES = ("queue", "kind", "error_kind", "since")


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
    found = recon_app(request).jobs.dead_letters.list_jobs_filtered(
        filters=filters.job_filter(request), state="dead", after_id=after, limit=PAGE_SIZE + 1)
    return _render(request, typed=filters.typed, jobs=found[:PAGE_SIZE],
                   next_after=found[PAGE_SIZE - 1].id if len(found) > PAGE_SIZE else None)


def preview(request: Request) -> Response:
    fields = Fields(request.query_params)
    try:
        filters = read_filters(fields)
    except UsageError as exc:
        return _render(request, status=422, error=str(exc), typed=_typed(fields))
    app = recon_app(request)
    budget = app.settings.engine.default_max_attempts
    run = replay(app.jobs, filters.job_filter(request), budget=budget, operator="preview", limit=PREVIEW_MAX + 1,
                 dry_run=True)
    return _render(request, typed=filters.typed, preview=run.jobs[:PREVIEW_MAX], more=len(run.replayed) > PREVIEW_MAX,
                   skipped=run.skipped, budget=budget)


def replay_dead(request: Request, fields: Fields) -> Response:
    operator = acting(request, Role.OPERATOR)
    try:
        filters = read_filters(fields)
    except UsageError as exc:
        return _render(request, status=422, error=f"nothing replayed: {exc}", typed=_typed(fields))
    app = recon_app(request)
    budget = app.settings.engine.default_max_attempts
    done = app.actions.replay(filters.job_filter(request), budget=budget, by=operator)
    if done.approval is not None:  # above [four_eyes] replay_count
        return _render(request, typed=filters.typed, notice=f"more than {app.four_eyes.config.replay_count} dead "
                       f"jobs match: the replay needs four eyes; approval {done.approval.id} waits for another "
                       "approver (Approvals)")
    run = done.run or ReplayRun(dry_run=False, budget=budget)
    log.info("console: %d dead jobs replayed by %s", len(run.replayed), operator)
    notice = (f"replayed {len(run.replayed)} dead jobs with {budget} fresh attempts each, by {operator}"
              + (f"; {len(run.skipped)} left dead: an unfinished job holds their unique key" if run.skipped else ""))
    return _render(request, typed=filters.typed, notice=notice, replayed=run.replayed[:200],
                   skipped=run.skipped[:200])


def _render(request: Request, *, status: int = 200, typed: dict[str, str], **context: object) -> Response:
    context = {"jobs": None, "next_after": None, "preview": None, "more": False, "skipped": [], "replayed": None,
               "budget": None, "notice": None, "error": None, **context}
    return pages(request).render(request, "dead.html", status=status, filters=typed,
                                 error_kinds=[k.value for k in ErrorKind], **context)


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
    Route("/dead/replay", action(replay_dead), methods=["POST"]),
]
