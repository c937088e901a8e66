"""The TOTP key: 32 random bytes in a file on the app's host, never in the database, that seals every operator's
TOTP seed at rest (PCI DSS v4.0.1 8.3.2: authentication factors unreadable in storage). A seed cannot be hashed
like a password (a login must read it to compute the expected code), so it is encrypted: AES-256-GCM, through
the ``cryptography`` library's ``AESGCM``.

**The key file**: one line, the 32 bytes in standard base64 (44 characters), readable by its owner only (no
group or other permission bit: mode 0600 or 0400), named by ``[operators] totp_key_file`` in the config file (a
relative path is relative to the config file's folder) or ``RECON_TOTP_KEY_FILE`` (which wins).
``recon operators totp-key new PATH`` writes one (mode 0600, never over an existing file). A file that is missing,
unreadable, open to the group or others, or not 32 bytes of base64 is a ``TotpKeyError`` (a configuration error:
exit 2), one line naming the file and what is wrong. The key is read when it is needed (an enrolment, a login of
an enrolled operator, ``seal-totp``, ``rotate-totp-key``), not by workers, which never need it.

**The stored form** (``operators.totp_secret``): ``v1.<key id>.<nonce>.<ciphertext>``:
- ``key id``: 8 hexadecimal digits of SHA-256 over a label and the key, so a seed sealed under another key is
  named as such ("sealed under key 1a2b3c4d, the configured key is ...") instead of yielding a wrong code;
- ``nonce``: 12 random bytes (GCM's 96-bit IV, drawn for every seal), base64url without padding;
- ``ciphertext``: the base32 seed encrypted, with GCM's 16-byte tag, base64url without padding;
- the associated data is ``v1:<operator name>``: a ciphertext copied into another operator's row does not open.
A stored value not starting ``v1.`` is a seed written before sealing (plain base32, which never holds a dot):
``recon operators seal-totp`` seals them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from recon.config import unknown
from recon.errors import ConfigError, TotpKeyError, TotpSealError

KEY_BYTES = 32
NONCE_BYTES = 12
VERSION = "v1"
ENV_VARIABLE = "RECON_TOTP_KEY_FILE"
SETTING = f"[operators] totp_key_file (or {ENV_VARIABLE})"
#: the largest key file read (a key is 44 characters and a newline)
_FILE_MAX = 1024
_KEYS = {"totp_key_file"}
_ID_LABEL = b"recon totp key id\x00"


def is_sealed(stored: str) -> bool:
    """Whether a stored seed is sealed (``v1.``...) rather than plain base32 written before sealing."""
    return stored.startswith(f"{VERSION}.")


@dataclass(frozen=True, slots=True)
class TotpKey:
    """A loaded key: ``id`` is its fingerprint, ``path`` the file it came from; the bytes never in a repr."""

    material: bytes = field(repr=False)
    id: str
    path: str

    @classmethod
    def of(cls, material: bytes, *, path: str) -> TotpKey:
        if len(material) != KEY_BYTES:
            raise TotpKeyError(f"{path}: holds {len(material)} bytes, not {KEY_BYTES}")
        return cls(material, hashlib.sha256(_ID_LABEL + material).hexdigest()[:8], path)

    def seal(self, seed: str, *, operator: str) -> str:
        """``seed`` sealed for ``operator``'s row: the stored form (module docstring), a fresh nonce each call."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.material).encrypt(nonce, seed.encode("ascii"), _aad(operator))
        return f"{VERSION}.{self.id}.{_b64(nonce)}.{_b64(sealed)}"

    def open(self, stored: str, *, operator: str) -> str:
        """The seed sealed in ``stored`` for ``operator``; TotpSealError (saying which, never the value) when it
        was sealed under another key, is malformed, or does not open (altered, or another operator's)."""
        parts = stored.split(".")
        if len(parts) != 4 or parts[0] != VERSION:
            raise TotpSealError(f"operator {operator!r}: the stored TOTP seed is not in the {VERSION} sealed form")
        if parts[1] != self.id:
            raise TotpSealError(f"operator {operator!r}: the TOTP seed was sealed under key {parts[1]}, the "
                                f"configured key ({self.path}) is {self.id}")
        try:
            nonce, sealed = _unb64(parts[2]), _unb64(parts[3])
            if len(nonce) != NONCE_BYTES:
                raise ValueError("nonce length")
            return AESGCM(self.material).decrypt(nonce, sealed, _aad(operator)).decode("ascii")
        except (ValueError, binascii.Error, InvalidTag, UnicodeDecodeError):
            raise TotpSealError(f"operator {operator!r}: the stored TOTP seed does not open with key {self.id} "
                                "(altered, or copied from another operator's row)") from None


def load_key(path: str | os.PathLike[str]) -> TotpKey:
    """The key in the file at ``path``; TotpKeyError, one line naming the file and what is wrong."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # non-blocking: a FIFO is refused, not waited on
    except FileNotFoundError:
        raise TotpKeyError(f"{where}: TOTP key file not found (recon operators totp-key new PATH makes one)") from None
    except PermissionError:
        raise TotpKeyError(f"{where}: TOTP key file is not readable by this user") from None
    except OSError as exc:
        raise TotpKeyError(f"{where}: TOTP key file cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        mode = os.fstat(fd).st_mode  # of the file opened, not of a name that may change meanwhile
        if stat.S_ISDIR(mode):
            raise TotpKeyError(f"{where}: TOTP key file is a directory")
        if not stat.S_ISREG(mode):
            raise TotpKeyError(f"{where}: TOTP key file is not a regular file")
        if mode & 0o077:
            raise TotpKeyError(f"{where}: TOTP key file is open to its group or others (mode "
                               f"{stat.S_IMODE(mode):04o}); chmod 600 it")
    except TotpKeyError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(_FILE_MAX + 1)
    try:
        if len(raw) > _FILE_MAX:
            raise ValueError("too long")
        material = base64.b64decode(raw.decode("ascii").strip(), validate=True)
    except (ValueError, binascii.Error):
        raise TotpKeyError(f"{where}: TOTP key file does not hold one line of base64 (the {KEY_BYTES} key bytes; "
                           "recon operators totp-key new PATH makes one)") from None
    return TotpKey.of(material, path=where)


def write_new_key(path: str | os.PathLike[str]) -> TotpKey:
    """A fresh key (32 bytes from the OS's CSPRNG) written to a new file at ``path``, mode 0600; TotpKeyError
    when the file exists (a key is never overwritten: the seeds it sealed would be lost)."""
    where = str(path)
    material = os.urandom(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise TotpKeyError(f"{where}: exists already; a TOTP key file is never overwritten") from None
    except OSError as exc:
        raise TotpKeyError(f"{where}: cannot create the TOTP key file ({exc.strerror or type(exc).__name__})") \
            from None
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask
        fh.write(base64.b64encode(material) + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    return TotpKey.of(material, path=where)


@dataclass(frozen=True, slots=True)
class TotpKeyConfig:
    """``[operators] totp_key_file``, or ``RECON_TOTP_KEY_FILE``: where the key is (None: not configured)."""

    file: str | None = None

    @classmethod
    def load(cls, table: Mapping[str, Any] | None, *, source: str = "config",
             environ: Mapping[str, str] | None = None) -> TotpKeyConfig:
        table = dict(table or {})
        where = f"{source}: operators"
        for key in table:
            if key not in _KEYS:
                raise unknown("key", key, _KEYS, f"{where}.")
        file = table.get("totp_key_file")
        if file is not None:
            if not isinstance(file, str) or not file.strip():
                raise ConfigError(f"{where}.totp_key_file: a file's path (a string), got {file!r}")
            if not Path(file).is_absolute() and source not in ("config", "<defaults>"):
                file = str(Path(source).parent / file)
        env = (os.environ if environ is None else environ).get(ENV_VARIABLE)
        if env is not None:
            if not env.strip():
                raise ConfigError(f"{ENV_VARIABLE}: is empty; unset it or name the TOTP key file")
            file = env
        return cls(file)

    def key(self, *, action: str) -> TotpKey:
        """The configured key, loaded now; TotpKeyError naming ``action`` and the setting when none is set."""
        if self.file is None:
            raise TotpKeyError(f"{action}: no TOTP key is configured: set {SETTING} to a key file (recon operators "
                               "totp-key new PATH makes one)")
        return load_key(self.file)


def _aad(operator: str) -> bytes:
    return f"{VERSION}:{operator}".encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text or "=" in text:
        raise ValueError("empty or padded")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
