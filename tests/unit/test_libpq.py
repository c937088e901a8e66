"""recon.db.libpq.connect_params: every URL form SQLAlchemy's psycopg dialect documents ("Specifying multiple
fallback hosts", the libpq keywords of the query string) becomes the libpq keywords libpq documents for it
(``host`` and ``port`` as comma-separated lists, ``service``, a socket directory as ``host``); and the
connection string libpq's own parser (psycopg's ``conninfo_to_dict``) reads back is the same."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from recon.db.database import parse_url
from recon.db.libpq import connect_params, conninfo
from recon.errors import ConfigError

DEFAULTS = {"connect_timeout": "10", "application_name": "recon"}


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql+psycopg://alice@/ledger?host=10.0.0.1:5432&host=10.0.0.2:5433&target_session_attrs=read-write",
     {"user": "alice", "dbname": "ledger", "host": "10.0.0.1,10.0.0.2", "port": "5432,5433",
      "target_session_attrs": "read-write"}),
    ("postgresql+psycopg://alice@/ledger?host=db-a,db-b&port=5432,5433&target_session_attrs=read-write",
     {"user": "alice", "dbname": "ledger", "host": "db-a,db-b", "port": "5432,5433",
      "target_session_attrs": "read-write"}),
    ("postgresql+psycopg://alice@/ledger?host=db-a:5432&host=db-b", {"user": "alice", "dbname": "ledger",
                                                                      "host": "db-a,db-b", "port": "5432,"}),
    ("postgresql+psycopg:///?service=recon", {"service": "recon"}),
    ("postgresql+psycopg://postgres@/ledger?host=/var/run/postgresql",
     {"user": "postgres", "dbname": "ledger", "host": "/var/run/postgresql"}),
    ("postgresql+psycopg://alice:p%40ss%20word@db-a:6432/ledger?sslmode=verify-full&keepalives_idle=10",
     {"user": "alice", "password": "p@ss word", "host": "db-a", "port": "6432", "dbname": "ledger",
      "sslmode": "verify-full", "keepalives_idle": "10"}),
])
def test_connect_params__every_url_form(url: str, expected: dict[str, str]) -> None:
    params = connect_params(make_url(url))
    assert params == {**DEFAULTS, **expected}
    assert conninfo_to_dict(conninfo(make_url(url))) == params  # libpq's quoting, read back by its parser


def test_connect_params__the_url_wins_over_recons_defaults_and_options_add_up() -> None:
    url = make_url("postgresql+psycopg://u@h/d?connect_timeout=3&application_name=billing&options=-c%20work_mem%3D64MB")
    params = connect_params(url, options="-c plan_cache_mode=force_custom_plan")
    assert params["connect_timeout"] == "3" and params["application_name"] == "billing"
    assert params["options"] == "-c work_mem=64MB -c plan_cache_mode=force_custom_plan"
    assert conninfo_to_dict(conninfo(url, options="-c a=b"))["options"] == "-c work_mem=64MB -c a=b"


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql+psycopg://u@/d?host=a:1&host=b:2&port=3", "Can't mix 'multihost' formats"),
    ("postgresql+psycopg://u@/d?host=a,b&port=1,x", "non-integer port"),
    ("postgresql+psycopg://u@h/d?sslmode=require&sslmode=disable", "'sslmode' is given 2 times"),
])
def test_connect_params__a_url_libpq_cannot_take_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        connect_params(make_url(url))
    with pytest.raises(ConfigError, match=message):  # refused when the configuration is read, not later
        parse_url(url)
