"""``/jobs/{id}``: one job with its attempt history and its dead-letter replays (``recon jobs show``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import PageError, page, pages, recon_app
from recon.params import INT64_MAX


def job_page(request: Request) -> Response:
    job_id: int = request.path_params["job_id"]
    if not 1 <= job_id <= INT64_MAX:
        raise PageError(404, f"job {job_id} not found")
    app = recon_app(request)
    client = app.client()
    job, attempts = client.get(job_id), client.attempts(job_id)  # JobNotFound: 404
    replays = app.jobs.dead_letters.replays(job_id)
    return pages(request).render(request, "job.html", job=job, attempts=attempts, replays=replays,
                                 payment_reference=_payment_reference(request, job.payload))


def _payment_reference(request: Request, payload: dict[str, object]) -> str | None:
    """The merchant reference of the payment a charge or reconcile job works on, for a link."""
    payment_id = payload.get("payment_id")
    if not isinstance(payment_id, int) or isinstance(payment_id, bool):
        return None
    payment = recon_app(request).payments.get(payment_id)
    return payment.merchant_reference if payment else None


ROUTES = [Route("/jobs/{job_id:int}", page(job_page), methods=["GET"])]
