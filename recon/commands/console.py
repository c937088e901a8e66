"""`recon console`: the web console (recon.console) on this process's App."""

from __future__ import annotations

import os

import click

from recon.app import App
from recon.params import say

#: the access token's environment variable: never a file, never printed, never logged
TOKEN_VARIABLE = "RECON_CONSOLE_TOKEN"  # nosec B105  # the variable's name, not a secret


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help=f"Address to bind; any but loopback needs {TOKEN_VARIABLE}.")
@click.option("--port", type=click.IntRange(0, 65535), default=8470, show_default=True, help="0: any free port.")
@click.pass_context
def console(ctx: click.Context, host: str, port: int) -> None:
    """Serve the web console: overview, review queue, dead letters, payment search, PSP controls.

    Binds 127.0.0.1 by default. With RECON_CONSOLE_TOKEN set (required for any other address), every request
    needs it: `Authorization: Bearer TOKEN`, or the login form's cookie. Runs until SIGINT or SIGTERM."""
    from recon.console.security import TOKEN_MIN_LENGTH, is_loopback
    from recon.console.server import run

    token = os.environ.get(TOKEN_VARIABLE) or None
    if token is None and not is_loopback(host):
        raise click.UsageError(f"--host {host} is not a loopback address: set {TOKEN_VARIABLE} (a secret of at "
                               f"least {TOKEN_MIN_LENGTH} characters) to require it on every request", ctx=ctx)
    if token is not None and (len(token) < TOKEN_MIN_LENGTH or token != token.strip()):
        raise click.UsageError(f"{TOKEN_VARIABLE}: must be at least {TOKEN_MIN_LENGTH} characters, without "
                               "leading or trailing spaces", ctx=ctx)
    app: App = ctx.obj
    app.db  # noqa: B018  # the schema is checked before the socket is bound: a wrong database fails at once
    run(app, host=host, port=port, token=token, on_ready_func=lambda url: say(f"console on {url}"))
