"""Named operators: who may do what (``Role``), their passwords, their console logins and the lockout
(``recon operators``, the console, every write command's ``--by``).

**Roles** are a ladder, each allowing what the ones below it do: ``viewer`` reads; ``operator`` resolves,
rechecks, replays, retries, cancels, pauses and resumes (the four-eyes ones as requests: recon.four_eyes);
``approver`` approves or rejects another operator's request; ``admin`` manages operators. ``authorize`` is the one
check: the name must be an operator's, enabled, whose role allows the action, else ``NotAllowed`` (exit 2, or the
console's 403) and nothing is done. The command line trusts whoever can reach the database to say who they are
(``--by``): it attributes and limits, it does not authenticate. The console authenticates (a password, and a TOTP
code when enrolled).

**Passwords** are hashed with argon2id (argon2-cffi's defaults: 64 MiB, 3 passes, 4 lanes; RFC 9106's second
recommended setting), at least 12 characters (PCI DSS 8.3.6), read from a prompt or stdin, never an argument,
never logged. A reset ends every console session of the operator.

**TOTP codes** (RFC 6238, 30-second steps, one step of clock drift either way) are used once: the step of each
accepted code is stored (``totp_last_step``), and a code of that step or an earlier one is refused ("TOTP code
already used"), a failure like a wrong one; of two logins with one code at once, one wins. The seed is printed
once at enrolment and stored sealed with the TOTP key (``recon.totp_key``: AES-256-GCM, the key in a file named
by ``[operators] totp_key_file``, never in the database); enrolling needs the key. A login whose sealed seed
cannot be opened (no key configured, another key, an altered or moved ciphertext) is refused whatever the
password, without counting towards the lockout, the form saying the second factor cannot be checked, the reason
logged and audited (never the seed). A plain seed written before sealing still logs in, with a warning, until
``seal_totp`` seals it; ``rotate_totp_key`` re-seals every seed under a new key, all or nothing. See
docs/operations.md, "Operators and audit", for the threat model.

**Lockout** (PCI DSS 8.3.4): 10 failed logins in a row lock the operator for 30 minutes; a login while locked is
refused without checking the password, and counts. A successful login forgets the failures. Every login, failure
and lock is an audit row. A login naming no operator is audited as such and answers the same as a wrong
password.

**The first operator** (an empty table) must be an admin and needs no ``--by``: the bootstrap, audited with the
user and host that ran it. After it, only an admin adds, disables, enables or resets operators.

**The console's access token** is the automation operator ``[console] token_operator`` (default
``console-token``) with the role ``[console] token_role`` (default ``viewer``): a row with no password, created or
brought to that role when the console starts.
"""

from __future__ import annotations

import builtins
import functools
import hmac
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import argon2
import pyotp
import sqlalchemy as sa
from argon2.exceptions import InvalidHashError, VerificationError

from recon.audit import entry
from recon.db.audit_store import AuditStore
from recon.db.database import Database
from recon.db.operator_store import OperatorStore
from recon.errors import NotAllowed, TotpKeyError, TotpSealError, UsageError
from recon.operator_rows import Credentials, Operator, Role
from recon.redact import redact
from recon.totp_key import TotpKey, TotpKeyConfig, is_sealed

log = logging.getLogger(__name__)

PASSWORD_MIN = 12
PASSWORD_MAX = 1024
NAME_MAX = 100
#: PCI DSS v4.0.1 8.3.4: at most 10 attempts, locked at least 30 minutes
LOCKOUT_LIMIT = 10
LOCKOUT_TIME = timedelta(minutes=30)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")
_HASHER = argon2.PasswordHasher()  # argon2id, RFC 9106's second recommended parameters
#: what the login form says when an enrolled operator's seed cannot be opened (the log and audit row say why)
SEED_UNREADABLE = ("the second factor cannot be checked: the TOTP key of this console is missing or does not "
                   "fit (its log says which); ask an admin")


def check_name(name: str) -> str:
    """An operator name: 1 to 100 characters of letters, digits and ``._@-``, starting with a letter or digit,
    and one redaction leaves as it is (the stored name is the compared one). UsageError otherwise."""
    if not name or len(name) > NAME_MAX or not _NAME.fullmatch(name) or redact(name) != name:
        raise UsageError(f"operator name {name!r}: 1 to {NAME_MAX} letters, digits and . _ @ -, starting with a "
                         "letter or digit (and no card number)")
    return name


def check_password(password: str) -> str:
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise UsageError(f"password: at least {PASSWORD_MIN} characters (PCI DSS 8.3.6), at most {PASSWORD_MAX}")
    return password


def hash_password(password: str) -> str:
    return _HASHER.hash(check_password(password))


@functools.cache
def _dummy_hash() -> str:
    """A hash to check a password against when the name is unknown, so that both cost the same (made once, when
    first needed: hashing costs what a login costs)."""
    return _HASHER.hash("recon: no such operator")


def password_matches(stored: str | None, password: str) -> bool:
    try:
        return _HASHER.verify(stored or _dummy_hash(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


@dataclass(frozen=True, slots=True)
class LoginResult:
    """A login's outcome: the operator when it succeeded, else the one line the login form shows."""

    operator: Operator | None
    message: str = ""


class Operators:
    """The operators and their checks, each change with its audit row in one transaction."""

    def __init__(self, db: Database, *, totp_key: TotpKeyConfig | None = None) -> None:
        """``totp_key``: where the TOTP key is (default: ``RECON_TOTP_KEY_FILE`` alone); read when needed."""
        self.db = db
        self.store = OperatorStore(db)
        self.audit = AuditStore(db)
        self.totp_key = totp_key if totp_key is not None else TotpKeyConfig.load(None)

    def get(self, name: str) -> Operator | None:
        return self.store.get(name)

    def list(self) -> list[Operator]:
        return self.store.list()

    def authorize(self, name: str | None, needs: Role, *, action: str,
                  conn: sa.Connection | None = None) -> Operator:
        """The enabled operator ``name`` whose role allows ``needs`` (read in ``conn``'s transaction when given);
        NotAllowed (nothing done) otherwise."""
        if not name:
            raise NotAllowed(f"{action}: --by names who acts: an operator (recon operators list)")
        found = self.store.find(conn, name) if conn is not None else self.store.get(name)
        if found is None:
            raise NotAllowed(f"{action}: {name!r} is not an operator (recon operators list)")
        if not found.enabled:
            raise NotAllowed(f"{action}: operator {name!r} is disabled")
        if not found.role.allows(needs):
            raise NotAllowed(f"{action}: operator {name!r} has the role {found.role}; this takes {needs} or above")
        return found

    def check_add(self, name: str, *, role: Role, by: str | None, totp: bool = False) -> None:
        """What ``add`` would refuse, before a password is asked for: a bad or taken name, ``by`` not an admin
        (or, for the first operator, a role other than admin), with ``totp`` no usable TOTP key."""
        check_name(name)
        if totp:
            self.totp_key.key(action="operators add --totp")
        with self.db.begin() as conn:
            if self.store.count(conn) == 0:
                if role is not Role.ADMIN:
                    raise UsageError("the first operator must be an admin (--role admin): they add the others")
            else:
                self._admin(conn, by, action="operators add")
            if self.store.find(conn, name) is not None:
                raise UsageError(f"operator {name!r} exists already (recon operators list)")

    def check_reset(self, name: str, *, by: str | None, totp: bool = False) -> None:
        """What ``reset_password`` would refuse, before a password is asked for."""
        if totp:
            self.totp_key.key(action="operators reset-password --totp")
        with self.db.begin() as conn:
            self._admin(conn, by, action="operators reset-password")
            self._existing(conn, name)

    def add(self, name: str, *, role: Role, password: str | None, by: str | None, bootstrap_actor: str,
            totp: bool = False) -> tuple[Operator, str | None]:
        """A new operator (the first one: an admin, by anyone; later ones by an admin). Returns it and its TOTP
        secret when ``totp`` (shown once, for the authenticator app)."""
        check_name(name)
        key = self.totp_key.key(action="operators add --totp") if totp else None
        password_hash = hash_password(password) if password is not None else None
        secret = pyotp.random_base32() if totp else None
        with self.db.begin() as conn:
            if self.store.count(conn) == 0:
                if role is not Role.ADMIN:
                    raise UsageError("the first operator must be an admin (--role admin): they add the others")
                actor = f"bootstrap:{bootstrap_actor}"
            else:
                actor = self._admin(conn, by, action="operators add").name
            self.store.add(conn, name=name, role=role, password_hash=password_hash,
                           totp_secret=key.seal(secret, operator=name) if key and secret else None)
            self.audit.append(conn, [entry(actor, "operator.add", name, role=str(role), totp=totp)])
        return self._existing_now(name), secret

    def disable(self, name: str, *, by: str | None) -> bool:
        """Disable ``name`` and end their sessions at once; False when they were disabled already."""
        with self.db.begin() as conn:
            admin = self._admin(conn, by, action="operators disable")
            target = self._existing(conn, name)
            if target.id == admin.id:
                raise UsageError("an admin cannot disable themselves (another admin can)")
            done = self.store.disable(conn, target)
            self.audit.append(conn, [entry(admin.name, "operator.disable", name,
                                           "done" if done else "unchanged")])
        return done

    def enable(self, name: str, *, by: str | None) -> bool:
        with self.db.begin() as conn:
            admin = self._admin(conn, by, action="operators enable")
            done = self.store.enable(conn, self._existing(conn, name))
            self.audit.append(conn, [entry(admin.name, "operator.enable", name, "done" if done else "unchanged")])
        return done

    def reset_password(self, name: str, *, password: str, by: str | None, totp: bool = False) -> str | None:
        """A new password (and a new TOTP secret with ``totp``, returned); the lockout cleared, sessions ended."""
        key = self.totp_key.key(action="operators reset-password --totp") if totp else None
        password_hash = hash_password(password)
        secret = pyotp.random_base32() if totp else None
        with self.db.begin() as conn:
            admin = self._admin(conn, by, action="operators reset-password")
            target = self._existing(conn, name)
            self.store.set_password(conn, target, password_hash=password_hash, reset_totp=totp,
                                    totp_secret=key.seal(secret, operator=target.name) if key and secret else None)
            self.audit.append(conn, [entry(admin.name, "operator.reset_password", name, totp_reset=totp)])
        return secret

    def ensure_token_operator(self, name: str, role: Role) -> Operator:
        """The console's automation operator: created without a password, or brought to ``role``."""
        check_name(name)
        with self.db.begin() as conn:
            found = self.store.find(conn, name)
            if found is None:
                self.store.add(conn, name=name, role=role, password_hash=None)
                self.audit.append(conn, [entry("system:console", "operator.add", name, role=str(role),
                                               token=True)])
            elif found.role is not role:
                self.store.set_role(conn, found, role)
                self.audit.append(conn, [entry("system:console", "operator.role", name, role=str(role),
                                               was=str(found.role))])
        return self._existing_now(name)

    def login(self, name: str, password: str, code: str | None, *, source: str) -> LoginResult:
        """A console login (module docstring); ``source`` (the client's address) goes into the audit row."""
        refused = LoginResult(None, "wrong operator name, password or code")
        creds = self.store.credentials(name) if _NAME.fullmatch(name or "") else None
        if creds is None:
            password_matches(None, password)  # the same cost as a known name
            self.audit.record(entry(f"unknown:{name[:NAME_MAX]}", "login.failed", name[:NAME_MAX], "refused",
                                    source=source, why="no such operator"))
            return refused
        op = creds.operator
        locked = op.locked_until is not None and op.locked_until > creds.checked_at
        seed, unreadable = self._seed(creds)
        step = _totp_step(seed, code, at=creds.checked_at) if seed else None
        why = ("locked" if locked else "disabled" if not op.enabled
               else "no password (the token operator)" if creds.password_hash is None else None)
        if why is None and unreadable is not None:
            return self._seed_unreadable(creds, password, unreadable, source=source)
        why = why or ("wrong password" if not password_matches(creds.password_hash, password)
               else "wrong TOTP code" if creds.totp_secret and step is None
               else "TOTP code already used" if step is not None and creds.totp_last_step is not None
               and step <= creds.totp_last_step
               else None)
        if why is None:
            plain = seed is not None and creds.totp_secret == seed
            with self.db.begin() as conn:
                if step is None or self.store.accept_totp_step(conn, op, step):
                    self.store.login_succeeded(conn, op)
                    self.audit.append(conn, [entry(op.name, "login.succeeded", op.name, source=source,
                                                   **({"totp_at_rest": "plain"} if plain else {}))])
                    if plain:
                        log.warning("console: operator %s's TOTP seed is stored in plain text; seal it: recon "
                                    "operators seal-totp", op.name)
                    return LoginResult(op)
            why = "TOTP code already used"  # another login took this code's step first
        with self.db.begin() as conn:
            failures, locked_until = self.store.login_failed(conn, op, limit=LOCKOUT_LIMIT, lockout=LOCKOUT_TIME)
            self.audit.append(conn, [entry(op.name, "login.failed", op.name, "refused", source=source, why=why,
                                           failures=failures)])
            if not locked and locked_until is not None and locked_until > creds.checked_at:
                self.audit.append(conn, [entry(op.name, "login.locked", op.name, "locked", source=source,
                                               until=locked_until.isoformat(), failures=failures)])
        log.warning("console: a login as %s from %s was refused (%s)", op.name, source, why)
        if locked or (locked_until is not None and locked_until > creds.checked_at):
            return LoginResult(None, f"too many failed logins: locked for {int(LOCKOUT_TIME.total_seconds() // 60)} "
                                     "minutes (an admin can reset the password)")
        return refused

    def seal_totp(self, *, by: str | None) -> builtins.list[str]:
        """Seal every plain TOTP seed (written before sealing) with the configured key, in one transaction, audited;
        the names of the operators sealed (none: nothing to do, and a second run does nothing)."""
        with self.db.begin() as conn:
            admin = self._admin(conn, by, action="operators seal-totp")
            key = self.totp_key.key(action="operators seal-totp")
            sealed = []
            for operator_id, name, stored in self.store.totp_secrets(conn):
                if not is_sealed(stored):
                    self._replace_seed(conn, operator_id, name, old=stored, new=key.seal(stored, operator=name))
                    sealed.append(name)
            self.audit.append(conn, [entry(admin.name, "operator.seal_totp", "operators",
                                           "done" if sealed else "unchanged", sealed=sealed, key=key.id)])
        return sealed

    def rotate_totp_key(self, new_key: TotpKey, *, by: str | None) -> int:
        """Every TOTP seed re-sealed under ``new_key`` (plain ones sealed too) in one transaction, all or nothing,
        audited; the number of seeds. A seed already under ``new_key`` is checked and kept (a rerun is safe); one
        that opens with neither key fails the whole command (TotpSealError), nothing changed."""
        with self.db.begin() as conn:
            admin = self._admin(conn, by, action="operators rotate-totp-key")
            old = self.totp_key.key(action="operators rotate-totp-key")
            if new_key.id == old.id:
                raise UsageError(f"--new-key-file {new_key.path}: holds the configured key ({old.id}); make a new "
                                 "one with recon operators totp-key new PATH")
            rows = self.store.totp_secrets(conn)
            for operator_id, name, stored in rows:
                if stored.startswith(f"v1.{new_key.id}."):
                    new_key.open(stored, operator=name)
                    continue
                seed = old.open(stored, operator=name) if is_sealed(stored) else stored
                self._replace_seed(conn, operator_id, name, old=stored, new=new_key.seal(seed, operator=name))
            self.audit.append(conn, [entry(admin.name, "operator.rotate_totp_key", "operators", seeds=len(rows),
                                           key=old.id, new_key=new_key.id)])
        return len(rows)

    def totp_warnings(self) -> builtins.list[str]:
        """At a console's start: what is wrong with the TOTP seeds at rest (plain seeds; sealed ones and no key
        configured), one line each; TotpKeyError when a key is configured but unusable."""
        key = self.totp_key.key(action="recon console") if self.totp_key.file is not None else None
        at_rest = [o.totp_at_rest for o in self.store.list()]
        lines = []
        if at_rest.count("plain"):
            lines.append(f"{at_rest.count('plain')} TOTP seeds are stored in plain text: recon operators seal-totp")
        if key is None and at_rest.count("sealed"):
            lines.append(f"{at_rest.count('sealed')} operators have a sealed TOTP seed but no TOTP key is "
                         "configured ([operators] totp_key_file): their logins are refused")
        return lines

    def _seed(self, creds: Credentials) -> tuple[str | None, str | None]:
        """(the operator's TOTP seed, None), or (None, why it cannot be read); (None, None) when not enrolled."""
        stored = creds.totp_secret
        if stored is None:
            return None, None
        if not is_sealed(stored):
            try:
                pyotp.TOTP(stored).byte_secret()
            except ValueError:  # binascii.Error: e.g. a sealed value whose "v1." was cut off
                return None, f"operator {creds.operator.name!r}: the stored TOTP seed is neither sealed nor base32"
            return stored, None
        try:
            return self.totp_key.key(action="console login").open(stored, operator=creds.operator.name), None
        except (TotpKeyError, TotpSealError) as exc:
            return None, str(exc)

    def _seed_unreadable(self, creds: Credentials, password: str, why: str, *, source: str) -> LoginResult:
        """A login refused because the seed cannot be opened: whatever the password (the form must not tell a
        right password from a wrong one), not counted towards the lockout (no credential was tried); logged and
        audited with the reason (never a seed)."""
        password_matches(creds.password_hash, password)  # the same cost as any other login
        op = creds.operator
        log.error("console: a login as %s from %s was refused: the TOTP seed cannot be checked: %s", op.name,
                  source, why)
        self.audit.record(entry(op.name, "login.failed", op.name, "refused", source=source,
                                why=f"the TOTP seed cannot be checked: {why}"))
        return LoginResult(None, SEED_UNREADABLE)

    def _replace_seed(self, conn: sa.Connection, operator_id: int, name: str, *, old: str, new: str) -> None:
        if not self.store.replace_totp_secret(conn, operator_id, old=old, new=new):
            raise UsageError(f"operator {name!r}: the TOTP seed changed meanwhile (an enrolment or a reset); "
                             "nothing was changed, run the command again")

    def _existing_now(self, name: str) -> Operator:
        found = self.store.get(name)
        if found is None:
            raise UsageError(f"operator {name!r}: no such operator (recon operators list)")
        return found

    def _admin(self, conn: sa.Connection, by: str | None, *, action: str) -> Operator:
        return self.authorize(by, Role.ADMIN, action=action, conn=conn)

    def _existing(self, conn: sa.Connection, name: str) -> Operator:
        found = self.store.find(conn, name)
        if found is None:
            raise UsageError(f"operator {name!r}: no such operator (recon operators list)")
        return found


def _totp_step(secret: str, code: str | None, *, at: datetime) -> int | None:
    """The time step whose code ``code`` is, within one step of ``at`` (the database's time, the clock the
    lockout reads too); None when it matches none of them."""
    totp = pyotp.TOTP(secret)
    typed = (code or "").strip()
    if not typed:
        return None
    now_step = totp.timecode(at)
    for offset in (0, -1, 1):
        if hmac.compare_digest(totp.at(at, counter_offset=offset), typed):
            return now_step + offset
    return None
