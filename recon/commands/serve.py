"""`recon serve`: the webhook endpoints (recon.webhooks), and with --console the console beside them."""

from __future__ import annotations

import os

import click

from recon.app import App
from recon.asgi import serve as serve_asgi
from recon.commands.console import TOKEN_VARIABLE
from recon.errors import ConfigError
from recon.params import say


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind (the PSPs must reach it: behind your TLS proxy).")
@click.option("--port", type=click.IntRange(0, 65535), default=8471, show_default=True, help="0: any free port.")
@click.option("--console", "with_console", is_flag=True,
              help=f"Also serve the console under / (any but a loopback address then needs {TOKEN_VARIABLE}).")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, with_console: bool) -> None:
    """Receive the PSPs' webhooks: POST /webhooks/NAME for each PSP with webhooks ([webhooks.NAME] path).

    Each request is verified by its PSP's receiver (Stripe-Signature; Adyen's HMAC signature and basic auth),
    stored once with a webhook job, and answered; a `recon worker` on the webhooks queue applies it. Secrets
    come from the environment: RECON_STRIPE_WEBHOOK_SECRET, RECON_ADYEN_HMAC_KEY (comma-separated while
    rotating), and RECON_ADYEN_WEBHOOK_USERNAME/PASSWORD for basic auth. Runs until SIGINT or SIGTERM."""
    from recon.console.security import TOKEN_MIN_LENGTH, is_loopback
    from recon.webhooks.server import create_app

    app: App = ctx.obj
    config = app.webhook_config
    if not config.receivers:
        raise ConfigError(f"no webhook secret is configured: set {app.webhook_secret_hint()}")
    token = os.environ.get(TOKEN_VARIABLE) or None
    if with_console:
        if token is None and not is_loopback(host):
            raise click.UsageError(f"--console on {host}, not a loopback address: set {TOKEN_VARIABLE} (at least "
                                   f"{TOKEN_MIN_LENGTH} characters) to require it on every console request", ctx=ctx)
        if token is not None and len(token) < TOKEN_MIN_LENGTH:
            raise click.UsageError(f"{TOKEN_VARIABLE}: must be at least {TOKEN_MIN_LENGTH} characters", ctx=ctx)
    app.db  # noqa: B018  # the schema is checked before the socket is bound
    paths = [path for psp, path in config.paths.items() if psp in config.receivers]

    def ready(url: str) -> None:
        say(f"webhooks on {', '.join(url.rstrip('/') + p for p in paths)}"
                   + (f"; console on {url}" if with_console else ""))

    serve_asgi(create_app(app, console=with_console, console_token=token), host=host, port=port,
               on_ready_func=ready)
