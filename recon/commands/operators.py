"""`recon operators add|list|disable|enable|reset-password`: the people (and the console's token) who act, and their
roles (recon.operators). Passwords come from a prompt or stdin, never an argument. `recon operators totp-key new`,
`seal-totp` and `rotate-totp-key`: the key that seals TOTP seeds at rest (recon.totp_key)."""

from __future__ import annotations

import json
import sys

import click

from recon.app import App
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.params import by_option, operator_name, say
from recon.render.desk import operators_table
from recon.totp_key import SETTING, load_key, write_new_key


@click.group()
def operators() -> None:
    """Named operators and their roles: viewer < operator < approver < admin."""


def _password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            raise UsageError("--password-stdin: stdin is empty; write the password on its first line")
        return line.rstrip("\r\n")
    password: str = click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True)
    return password


def _totp_line(name: str, secret: str | None) -> None:
    if secret:
        say(f"TOTP key for {name}, shown this once (type it into an authenticator app; RFC 6238, 30 s, 6 digits): "
            f"{secret}")


@operators.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice([r.value for r in Role]), required=True)
@click.option("--totp", is_flag=True, help="Enrol a TOTP second factor for console logins (its key printed once).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin's first line, not a prompt.")
@click.option("--no-password", is_flag=True, help="An operator who never logs in to the console (scripts' --by).")
@by_option("The admin who adds them; not needed for the first operator, who must be an admin.")
@click.pass_obj
def operators_add(app: App, name: str, role: str, totp: bool, password_stdin: bool, no_password: bool,
                  by: str | None) -> None:
    """Add operator NAME with a role; the password is asked for (twice) unless --password-stdin."""
    if no_password and (totp or password_stdin):
        raise UsageError("--no-password: not with --totp or --password-stdin")
    app.operators.check_add(name, role=Role(role), by=by, totp=totp)  # before the prompt
    password = None if no_password else _password(password_stdin)
    added, secret = app.operators.add(name, role=Role(role), password=password, by=by,
                                      bootstrap_actor=operator_name(), totp=totp)
    say(f"operator {added.name} added as {added.role}")
    _totp_line(added.name, secret)


@operators.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def operators_list(app: App, as_json: bool) -> None:
    """Every operator: role, enabled, TOTP (sealed, or plain from before sealing), lockout (never a password or a
    TOTP seed); a last line counts the seeds still plain."""
    found = app.operators.list()
    plain = sum(o.totp_at_rest == "plain" for o in found)
    if as_json:
        click.echo(json.dumps({"operators": [o.to_dict() for o in found], "totp_plain": plain}))
        return
    operators_table(found)
    if plain:
        say(f"{plain} TOTP seeds are stored in plain text (written before sealing): recon operators seal-totp")


@operators.group("totp-key")
def totp_key() -> None:
    """The key file that seals TOTP seeds at rest (AES-256-GCM; docs/operations.md, "Operators and audit")."""


@totp_key.command("new")
@click.argument("path", type=click.Path(dir_okay=False))
def totp_key_new(path: str) -> None:
    """Write a new TOTP key to PATH: 32 random bytes in base64, mode 0600; never over an existing file."""
    key = write_new_key(path)
    say(f"TOTP key {key.id} written to {path} (mode 0600): back it up apart from the database; name it in "
        f"{SETTING}")


@operators.command("seal-totp")
@by_option("The admin who seals them.")
@click.pass_obj
def operators_seal_totp(app: App, by: str | None) -> None:
    """Seal every TOTP seed stored in plain text (before sealing) with the configured key, in one transaction."""
    sealed = app.operators.seal_totp(by=by)
    say(f"{len(sealed)} TOTP seeds sealed ({', '.join(sealed)})" if sealed else "no TOTP seed is stored in plain text")


@operators.command("rotate-totp-key")
@click.option("--new-key-file", required=True, type=click.Path(dir_okay=False),
              help="The new key (recon operators totp-key new PATH); name it in the config afterwards.")
@by_option("The admin who rotates it.")
@click.pass_obj
def operators_rotate_totp_key(app: App, new_key_file: str, by: str | None) -> None:
    """Re-seal every TOTP seed under a new key, in one transaction (all or nothing); then point the config at it."""
    key = load_key(new_key_file)
    count = app.operators.rotate_totp_key(key, by=by)
    say(f"{count} TOTP seeds sealed under key {key.id}: now set {SETTING} to {new_key_file} and restart the "
        "console (until then its logins with a TOTP code are refused)")


@operators.command("disable")
@click.argument("name")
@by_option("The admin who disables them.")
@click.pass_obj
def operators_disable(app: App, name: str, by: str | None) -> None:
    """Disable operator NAME: no more logins or actions, and their console sessions end at once."""
    done = app.operators.disable(name, by=by)
    say(f"operator {name} disabled; their console sessions are ended" if done else f"operator {name} was disabled")


@operators.command("enable")
@click.argument("name")
@by_option("The admin who enables them.")
@click.pass_obj
def operators_enable(app: App, name: str, by: str | None) -> None:
    """Enable a disabled operator NAME again (the lockout cleared)."""
    done = app.operators.enable(name, by=by)
    say(f"operator {name} enabled" if done else f"operator {name} was enabled")


@operators.command("reset-password")
@click.argument("name")
@click.option("--totp", is_flag=True, help="Also enrol a new TOTP key (printed once).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin's first line, not a prompt.")
@by_option("The admin who resets it.")
@click.pass_obj
def operators_reset_password(app: App, name: str, totp: bool, password_stdin: bool, by: str | None) -> None:
    """A new password for NAME (asked for twice unless --password-stdin); the lockout cleared, their console
    sessions ended."""
    app.operators.check_reset(name, by=by, totp=totp)  # before the prompt
    secret = app.operators.reset_password(name, password=_password(password_stdin), by=by, totp=totp)
    say(f"operator {name}: password reset; their console sessions are ended")
    _totp_line(name, secret)
