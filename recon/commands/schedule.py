"""`recon schedule list`: the periodic jobs of ``[schedule.*]``, their last and next slots."""

from __future__ import annotations

import json

import click

from recon.app import App
from recon.db.schedule_store import ScheduleStore
from recon.render.jobs import schedule_table
from recon.scheduler import status


@click.group()
def schedule() -> None:
    """Periodic jobs ([schedule.NAME] in the config file), run by every `recon worker`."""


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def schedule_list(app: App, as_json: bool) -> None:
    """Each schedule: its kind, when, its last slot and how its job ended, and its next slot."""
    rows = status(app.schedules, ScheduleStore(app.db).latest(), app.jobs.db_now())
    if as_json:
        click.echo(json.dumps({"schedules": rows}))
        return

    schedule_table(rows)
