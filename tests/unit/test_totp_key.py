"""recon.totp_key without a database: the setting (file, environment, errors), the key id, and a nonce per seal."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from recon.errors import ConfigError, TotpKeyError, TotpSealError
from recon.totp_key import ENV_VARIABLE, TotpKey, TotpKeyConfig, is_sealed, load_key, write_new_key


def test_config__file_relative_to_the_config_environment_wins_errors_name_the_key(tmp_path: Path) -> None:
    source = str(tmp_path / "etc" / "recon.toml")
    assert TotpKeyConfig.load({"totp_key_file": "totp.key"}, source=source, environ={}).file == \
        str(tmp_path / "etc" / "totp.key")
    assert TotpKeyConfig.load({"totp_key_file": "/k/totp.key"}, source=source, environ={}).file == "/k/totp.key"
    assert TotpKeyConfig.load({"totp_key_file": "/k"}, source=source, environ={ENV_VARIABLE: "/e"}).file == "/e"
    assert TotpKeyConfig.load(None, environ={}).file is None
    with pytest.raises(ConfigError, match=r"recon.toml: operators.totp_keyfile: unknown key; did you mean "
                                          r"'totp_key_file'\?"):
        TotpKeyConfig.load({"totp_keyfile": "x"}, source=source, environ={})
    with pytest.raises(ConfigError, match=r"operators\.totp_key_file: a file's path"):
        TotpKeyConfig.load({"totp_key_file": 3}, source=source, environ={})
    with pytest.raises(ConfigError, match=f"{ENV_VARIABLE}: is empty"):
        TotpKeyConfig.load(None, environ={ENV_VARIABLE: " "})
    with pytest.raises(TotpKeyError, match=r"operators add --totp: no TOTP key is configured: set \[operators\] "
                                           "totp_key_file"):
        TotpKeyConfig.load(None, environ={}).key(action="operators add --totp")


def test_key__id_is_a_fingerprint_seals_differ_and_nothing_shows_the_bytes(tmp_path: Path) -> None:
    key = write_new_key(tmp_path / "a.key")
    again = load_key(tmp_path / "a.key")
    assert again.id == key.id and len(key.id) == 8 and write_new_key(tmp_path / "b.key").id != key.id
    material = base64.b64decode((tmp_path / "a.key").read_text())
    assert material.hex() not in repr(key) and str(material) not in repr(key)
    seed = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
    one, two = key.seal(seed, operator="ann"), key.seal(seed, operator="ann")
    assert one != two and is_sealed(one) and not is_sealed(seed)  # a fresh nonce each time
    assert key.open(one, operator="ann") == seed
    with pytest.raises(TotpSealError, match="does not open"):
        key.open(one, operator="bob")
    with pytest.raises(TotpSealError, match="not in the v1 sealed form"):
        key.open("v1.abc", operator="ann")
    with pytest.raises(TotpKeyError, match="holds 31 bytes, not 32"):
        TotpKey.of(bytes(31), path="x")
