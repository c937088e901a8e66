"""`recon approvals list|show|approve|reject`: four-eyes requests (recon.four_eyes)."""

from __future__ import annotations

import json

import click

from recon.app import App
from recon.operator_rows import ApprovalState
from recon.params import JOB_ID, LIMIT, by_option, say
from recon.render.desk import approvals_table


@click.group()
def approvals() -> None:
    """Four eyes: overrides, PSP pauses and large replays wait here for a second operator."""


@approvals.command("list")
@click.option("--state", type=click.Choice([s.value for s in ApprovalState]), default="pending", show_default=True)
@click.option("--limit", type=LIMIT, default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def approvals_list(app: App, state: str, limit: int, as_json: bool) -> None:
    """The newest requests in a state (pending ones past their time become expired first)."""
    found = app.four_eyes.in_state(ApprovalState(state), limit=min(limit, 10_000))
    if as_json:
        click.echo(json.dumps({"approvals": [a.to_dict() for a in found]}))
        return
    approvals_table(found, state=state)


@approvals.command("show")
@click.argument("approval_id", type=JOB_ID, metavar="ID")
@click.pass_obj
def approvals_show(app: App, approval_id: int) -> None:
    """One request, with what it will run (its payload)."""
    click.echo(json.dumps(app.four_eyes.get(approval_id).to_dict(), indent=1, sort_keys=True))


@approvals.command("approve")
@click.argument("approval_id", type=JOB_ID, metavar="ID")
@by_option("The approver: role approver or admin, not the one who asked.")
@click.pass_obj
def approvals_approve(app: App, approval_id: int, by: str | None) -> None:
    """Approve request ID and run it now; exit 3 when the approved action failed (the request says why)."""
    done = app.actions.approve(approval_id, by=by)
    say(f"approval {done.id} ({done.action} of {done.subject}) {done.state} by {done.decided_by}: {done.result}")
    if done.state is ApprovalState.FAILED:
        raise SystemExit(3)


@approvals.command("reject")
@click.argument("approval_id", type=JOB_ID, metavar="ID")
@by_option("The approver: role approver or admin, not the one who asked.")
@click.pass_obj
def approvals_reject(app: App, approval_id: int, by: str | None) -> None:
    """Reject request ID: nothing runs."""
    done = app.actions.reject(approval_id, by=by)
    say(f"approval {done.id} ({done.action} of {done.subject}) rejected by {done.decided_by}")
