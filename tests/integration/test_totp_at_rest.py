"""TOTP seeds unreadable at rest (recon.totp_key, recon.operators; PCI DSS v4.0.1 8.3.2), on both databases:
enrolment seals the seed with the key file's key (checked by decrypting with cryptography's AESGCM as the
documented format says, not through recon's own open), a login opens it, a wrong or missing key and a ciphertext
moved to another operator's row are refused clearly, plain seeds from before sealing are sealed by
`recon operators seal-totp`, `rotate-totp-key` re-seals all or nothing, and key-file problems exit 2 in one line."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
from pathlib import Path

import pyotp
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from recon.db.database import Database
from recon.operator_rows import Role
from recon.operators import SEED_UNREADABLE, Operators
from recon.totp_key import ENV_VARIABLE, TotpKey, write_new_key
from tests.cli import Runner
from tests.operators import PASSWORD


def stored_seed(db: Database, name: str) -> str:
    with db.begin() as conn:
        return str(conn.execute(sa.text("SELECT totp_secret FROM operators WHERE name = :n"), {"n": name})
                   .scalar_one())


def set_stored_seed(db: Database, name: str, value: str) -> None:
    """A row as written before sealing (a plain seed), or a ciphertext moved or altered by someone with the DB."""
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE operators SET totp_secret = :v WHERE name = :n"), {"v": value, "n": name})


def decrypt_as_documented(key_file: Path, stored: str, operator: str) -> str:
    """The seed in ``stored`` read by the format docs/operations.md and recon.totp_key describe, with the key
    file's bytes and cryptography's AESGCM directly: v1.<key id>.<nonce b64url>.<ciphertext b64url>, AAD
    "v1:<operator>"."""
    version, _key_id, nonce, sealed = stored.split(".")
    assert version == "v1"
    key = base64.b64decode(key_file.read_text().strip())

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    return AESGCM(key).decrypt(unb64(nonce), unb64(sealed), f"v1:{operator}".encode()).decode()


def audit_text(db: Database) -> str:
    with db.begin() as conn:
        return json.dumps([[str(c) for c in r] for r in conn.execute(sa.text("SELECT * FROM audit_log"))])


def last_refusal(db: Database) -> str:
    with db.begin() as conn:
        evidence = conn.execute(sa.text("SELECT evidence FROM audit_log WHERE action = 'login.failed' "
                                        "ORDER BY id DESC LIMIT 1")).scalar_one()
    return str((json.loads(evidence) if isinstance(evidence, str) else evidence)["why"])


def failed_logins(db: Database, name: str) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text("SELECT failed_logins FROM operators WHERE name = :n"), {"n": name})
                   .scalar_one())


def test_enrol__the_seed_is_stored_sealed_and_logs_in(db: Database, db_url: str, staff: dict[str, Role],
                                                      totp_key: TotpKey, recon: Runner,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    r = recon("operators", "add", "carl", "--role", "viewer", "--password-stdin", "--totp", "--by", "root",
              db_url=db_url)
    assert r.returncode == 0, r.stderr
    seed = r.stdout.strip().rsplit(" ", 1)[-1]
    assert len(seed) == 32 and base64.b32decode(seed)  # printed once, for the authenticator app
    stored = stored_seed(db, "carl")
    assert seed not in stored and not re.search(r"[A-Z2-7]{32}", stored)  # no base32 seed in the column
    assert stored.startswith(f"v1.{totp_key.id}.")
    assert decrypt_as_documented(Path(totp_key.path), stored, "carl") == seed
    ops = Operators(db)
    assert ops.login("carl", PASSWORD, pyotp.TOTP(seed).now(), source="t").operator is not None
    listed = recon("operators", "list", "--json", db_url=db_url)
    assert seed not in listed.stdout + listed.stderr and stored not in listed.stdout
    doc = json.loads(listed.stdout)
    assert doc["totp_plain"] == 0
    assert [o["totp_at_rest"] for o in doc["operators"] if o["name"] == "carl"] == ["sealed"]
    assert seed not in audit_text(db) and stored not in audit_text(db)
    again = ops.reset_password("carl", password=PASSWORD, by="root", totp=True)  # a reset seals its new seed too
    assert again and again != seed and decrypt_as_documented(Path(totp_key.path), stored_seed(db, "carl"),
                                                             "carl") == again


def test_enrol__without_a_key_exits_2_naming_the_setting(db: Database, db_url: str, staff: dict[str, Role],
                                                         recon: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VARIABLE, raising=False)
    for args in (("add", "carl", "--role", "viewer"), ("reset-password", "bob")):
        monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
        r = recon("operators", *args, "--password-stdin", "--totp", "--by", "root", db_url=db_url)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "no TOTP key is configured: set [operators] totp_key_file (or RECON_TOTP_KEY_FILE)" in r.stderr
    assert Operators(db).get("carl") is None  # nothing written
    assert not Operators(db).get("bob").has_totp  # type: ignore[union-attr]


@pytest.mark.parametrize("problem", ["missing", "short", "mode 0644", "not base64", "a directory", "a fifo"])
def test_key_file__a_bad_one_exits_2_with_one_line_naming_it(db_url: str, staff: dict[str, Role], recon: Runner,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            problem: str) -> None:
    path = tmp_path / "totp.key"
    if problem == "short":
        path.write_text(base64.b64encode(os.urandom(16)).decode() + "\n")
    elif problem == "mode 0644":
        path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    elif problem == "not base64":
        path.write_text("this is not base64 at all!\n")
    elif problem == "a directory":
        path.mkdir()
    elif problem == "a fifo":
        os.mkfifo(path, 0o600)  # refused, not waited on
    if path.is_file():
        path.chmod(0o644 if problem == "mode 0644" else 0o600)
    monkeypatch.setenv(ENV_VARIABLE, str(path))
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    r = recon("operators", "add", "carl", "--role", "viewer", "--password-stdin", "--totp", "--by", "root",
              db_url=db_url)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    expected = {"missing": "TOTP key file not found", "short": "holds 16 bytes, not 32",
                "mode 0644": "open to its group or others (mode 0644); chmod 600 it",
                "not base64": "does not hold one line of base64", "a directory": "is a directory",
                "a fifo": "is not a regular file"}[problem]
    assert f"{path}: " in r.stderr and expected in r.stderr, r.stderr


def test_totp_key_new__writes_mode_0600_and_never_overwrites(tmp_path: Path, recon: Runner) -> None:
    path = tmp_path / "keys" / "totp.key"
    path.parent.mkdir()
    r = recon("operators", "totp-key", "new", str(path))
    assert r.returncode == 0, r.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert len(base64.b64decode(text.strip(), validate=True)) == 32 and text.endswith("\n") and text not in r.stdout
    r = recon("operators", "totp-key", "new", str(path))
    assert r.returncode == 2 and "exists already" in r.stderr and path.read_text() == text


def test_login__no_key_or_the_wrong_key_is_refused_clearly_whatever_the_password(
        db: Database, staff: dict[str, Role], totp_key: TotpKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    seed = Operators(db).reset_password("bob", password=PASSWORD, by="root", totp=True)
    assert seed
    other = write_new_key(tmp_path / "other.key")
    monkeypatch.setenv(ENV_VARIABLE, other.path)
    caplog.set_level(logging.ERROR, logger="recon.operators")
    for password in (PASSWORD, "not the password at all"):  # the same answer: no password oracle
        result = Operators(db).login("bob", password, pyotp.TOTP(seed).now(), source="t")
        assert result.operator is None and result.message == SEED_UNREADABLE
    assert f"sealed under key {totp_key.id}, the configured key ({other.path}) is {other.id}" in last_refusal(db)
    assert failed_logins(db, "bob") == 0  # no credential was tried: not towards the lockout
    assert any("the TOTP seed cannot be checked" in r.getMessage() for r in caplog.records)
    assert seed not in caplog.text and seed not in audit_text(db)
    monkeypatch.delenv(ENV_VARIABLE)
    assert Operators(db).login("bob", PASSWORD, pyotp.TOTP(seed).now(), source="t").message == SEED_UNREADABLE
    assert "no TOTP key is configured" in last_refusal(db)
    monkeypatch.setenv(ENV_VARIABLE, totp_key.path)
    assert Operators(db).login("bob", PASSWORD, pyotp.TOTP(seed).now(), source="t").operator is not None


def test_login__a_ciphertext_moved_to_another_operator_does_not_open(db: Database, staff: dict[str, Role],
                                                                     totp_key: TotpKey) -> None:
    ops = Operators(db)
    bobs = ops.reset_password("bob", password=PASSWORD, by="root", totp=True)
    assert bobs and ops.reset_password("amy", password=PASSWORD, by="root", totp=True)
    set_stored_seed(db, "amy", stored_seed(db, "bob"))  # someone with the database copies bob's seed to amy
    result = ops.login("amy", PASSWORD, pyotp.TOTP(bobs).now(), source="t")
    assert result.operator is None and result.message == SEED_UNREADABLE
    assert "does not open with key" in last_refusal(db)
    stored = stored_seed(db, "bob")
    tampered = stored[:-2] + ("A" if stored[-2] != "A" else "B") + stored[-1]
    set_stored_seed(db, "bob", tampered)
    assert ops.login("bob", PASSWORD, pyotp.TOTP(bobs).now(), source="t").message == SEED_UNREADABLE
    assert "does not open with key" in last_refusal(db)
    set_stored_seed(db, "bob", stored.removeprefix("v1."))  # no longer sealed, and not a plain seed either
    assert ops.login("bob", PASSWORD, pyotp.TOTP(bobs).now(), source="t").message == SEED_UNREADABLE
    assert "neither sealed nor base32" in last_refusal(db)


def test_seal_totp__seals_plain_seeds_once_audited(db: Database, db_url: str, staff: dict[str, Role],
                                                   totp_key: TotpKey, recon: Runner,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    plain = pyotp.random_base32()
    set_stored_seed(db, "ann", plain)  # enrolled before sealing existed
    listed = recon("operators", "list", db_url=db_url)
    assert "1 TOTP seeds are stored in plain text" in listed.stdout and plain not in listed.stdout
    assert json.loads(recon("operators", "list", "--json", db_url=db_url).stdout)["totp_plain"] == 1
    stats = recon("stats", db_url=db_url)  # the count finance ops' daily look shows too
    assert stats.returncode == 0, stats.stderr
    assert ("operators: 5 (5 enabled); TOTP seeds sealed 0, plain 1 (stored in plain text: recon operators "
            "seal-totp)") in " ".join(stats.stdout.split()) and plain not in stats.stdout
    assert json.loads(recon("stats", "--json", db_url=db_url).stdout)["operators"] == {
        "count": 5, "enabled": 5, "totp": {"sealed": 0, "plain": 1}}
    caplog.set_level(logging.WARNING, logger="recon.operators")
    assert Operators(db).login("ann", PASSWORD, pyotp.TOTP(plain).now(), source="t").operator is not None
    assert any("stored in plain text" in r.getMessage() for r in caplog.records) and plain not in caplog.text
    r = recon("operators", "seal-totp", "--by", "root", db_url=db_url)
    assert r.returncode == 0 and "1 TOTP seeds sealed (ann)" in r.stdout, r.stderr
    assert decrypt_as_documented(Path(totp_key.path), stored_seed(db, "ann"), "ann") == plain
    r = recon("operators", "seal-totp", "--by", "root", db_url=db_url)
    assert r.returncode == 0 and "no TOTP seed is stored in plain text" in r.stdout
    with db.begin() as conn:
        rows = [tuple(x) for x in conn.execute(sa.text(
            "SELECT actor, outcome FROM audit_log WHERE action = 'operator.seal_totp' ORDER BY id"))]
    assert rows == [("root", "done"), ("root", "unchanged")]
    assert plain not in audit_text(db)
    assert json.loads(recon("operators", "list", "--json", db_url=db_url).stdout)["totp_plain"] == 0
    assert json.loads(recon("stats", "--json", db_url=db_url).stdout)["operators"]["totp"] == {"sealed": 1, "plain": 0}
    r = recon("operators", "seal-totp", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "has the role operator" in r.stderr


def test_rotate_totp_key__reseals_every_seed_all_or_nothing(db: Database, db_url: str, staff: dict[str, Role],
                                                           totp_key: TotpKey, recon: Runner, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ops = Operators(db)
    seeds = {name: ops.reset_password(name, password=PASSWORD, by="root", totp=True) for name in ("bob", "amy")}
    seeds["ann"] = pyotp.random_base32()
    set_stored_seed(db, "ann", str(seeds["ann"]))  # a plain one: rotation seals it too
    new = write_new_key(tmp_path / "new.key")
    r = recon("operators", "rotate-totp-key", "--new-key-file", totp_key.path, "--by", "root", db_url=db_url)
    assert r.returncode == 2 and "holds the configured key" in r.stderr
    vic = pyotp.random_base32()
    set_stored_seed(db, "vic", "v1." + totp_key.id + ".AAAAAAAAAAAAAAAA.AAAA")  # does not open: all or nothing
    before = {n: stored_seed(db, n) for n in ("bob", "amy", "ann", "vic")}
    r = recon("operators", "rotate-totp-key", "--new-key-file", new.path, "--by", "root", db_url=db_url)
    assert r.returncode == 2 and "operator 'vic'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert {n: stored_seed(db, n) for n in before} == before  # nothing changed
    set_stored_seed(db, "vic", vic)
    seeds["vic"] = vic
    r = recon("operators", "rotate-totp-key", "--new-key-file", new.path, "--by", "root", db_url=db_url)
    assert r.returncode == 0 and f"4 TOTP seeds sealed under key {new.id}" in r.stdout, r.stderr
    for name, seed in seeds.items():
        assert stored_seed(db, name).startswith(f"v1.{new.id}.")
        assert decrypt_as_documented(Path(new.path), stored_seed(db, name), name) == seed
    with db.begin() as conn:
        evidence = conn.execute(sa.text("SELECT evidence FROM audit_log WHERE action = 'operator.rotate_totp_key'"))\
            .scalar_one()
    assert (json.loads(evidence) if isinstance(evidence, str) else evidence) == {
        "seeds": 4, "key": totp_key.id, "new_key": new.id}
    r = recon("operators", "rotate-totp-key", "--new-key-file", new.path, "--by", "root", db_url=db_url)
    assert r.returncode == 0, r.stderr  # a rerun before the config names the new key: checked and kept
    assert Operators(db).login("bob", PASSWORD, pyotp.TOTP(str(seeds["bob"])).now(), source="t").message \
        == SEED_UNREADABLE  # the config still names the old key
    monkeypatch.setenv(ENV_VARIABLE, new.path)
    assert Operators(db).login("bob", PASSWORD, pyotp.TOTP(str(seeds["bob"])).now(), source="t").operator


def test_console__an_unusable_configured_key_exits_2_at_its_start(db_url: str, recon: Runner, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "totp.key"
    path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    path.chmod(0o640)
    monkeypatch.setenv(ENV_VARIABLE, str(path))
    r = recon("console", "--port", "0", db_url=db_url)
    assert r.returncode == 2 and r.stderr.strip() == (f"recon: {path}: TOTP key file is open to its group or "
                                                      "others (mode 0640); chmod 600 it"), r.stderr
