"""The ``Query`` type: one named SQL statement, written once with placeholders that render per dialect.

- ``{now}``: the database clock on PostgreSQL (``coalesce(:now, now())``, so tests can pass a frozen time);
  on SQLite always ``:now`` from the process clock (integer microseconds, see ``recon.db.schema``).
- ``{secs:NAME}``: the float parameter NAME as a duration to add to a timestamp.
- ``{json:NAME}``: the parameter NAME as a JSON document.

Where the dialects need different statements (PostgreSQL's SKIP LOCKED and data-modifying CTEs; SQLite's
``json_each``), a query carries both. The statements themselves live in ``recon.db.<concept>_queries``, one
module per table group, and only that group's ``recon.db.<concept>_store`` executes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlalchemy import TextClause, bindparam, text

_RENDER = {
    "postgresql": {
        "now": "coalesce(CAST(:now AS timestamptz), now())",
        "secs": "make_interval(secs => CAST(:{} AS double precision))",
        "json": "CAST(:{} AS jsonb)",
    },
    "sqlite": {
        "now": ":now",
        "secs": "CAST(:{} * 1000000 AS INTEGER)",
        "json": ":{}",
    },
}
_PLACEHOLDER = re.compile(r"\{(now|secs|json)(?::(\w+))?\}")
_BIND = re.compile(r"(?<![:\w]):(\w+)")  # :name, not ::type nor a time like 10:30


@dataclass(frozen=True)
class Query:
    """A named statement. ``sql`` serves both dialects unless ``postgresql`` or ``sqlite`` overrides it."""

    name: str
    doc: str
    sql: str = ""
    postgresql: str = ""
    sqlite: str = ""
    expanding: tuple[str, ...] = ()
    _cache: dict[str, TextClause] = field(default_factory=dict, compare=False, repr=False)
    _driver_cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def for_dialect(self, dialect: str) -> TextClause:
        clause = self._cache.get(dialect)
        if clause is None:
            source = getattr(self, dialect, "") or self.sql
            if not source:
                raise NotImplementedError(f"query {self.name} has no {dialect} form")
            rendered = _PLACEHOLDER.sub(lambda m: _RENDER[dialect][m[1]].format(m[2]), source)
            clause = text(rendered)
            if self.expanding:
                clause = clause.bindparams(*(bindparam(n, expanding=True) for n in self.expanding))
            self._cache[dialect] = clause
        return clause

    def for_driver(self, dialect: str, **expand: int) -> str:
        """The statement for the driver itself (psycopg's ``%(name)s``; sqlite3 takes ``:name`` as it is),
        bypassing SQLAlchemy: the worker's hot path (``DedicatedConnection``, ``DedicatedSqlite``) and the
        single enqueue. ``expand`` gives the length of each expanding parameter, whose items are then passed
        as ``NAME_0``, ``NAME_1``, … (one placeholder each, as SQLAlchemy renders them, so that the planner
        sees the same statement shape)."""
        key = f"{dialect}:{sorted(expand.items())}"
        cached = self._driver_cache.get(key)
        if cached is not None:
            return cached
        source = getattr(self, dialect, "") or self.sql
        if not source:
            raise NotImplementedError(f"query {self.name} has no {dialect} form")
        rendered = _PLACEHOLDER.sub(lambda m: _RENDER[dialect][m[1]].format(m[2]), source)
        if "%" in rendered and dialect == "postgresql":
            raise ValueError(f"query {self.name}: a literal % would need escaping for the driver")
        for name in self.expanding:
            n = expand.get(name)
            if not n:
                raise ValueError(f"query {self.name}: the length of expanding parameter {name!r} is needed")
            rendered = rendered.replace(f":{name}", "(" + ", ".join(f":{name}_{i}" for i in range(n)) + ")")
        if dialect == "postgresql":
            rendered = _BIND.sub(r"%(\1)s", rendered)
        self._driver_cache[key] = rendered
        return rendered


# --- enqueue -------------------------------------------------------------------------------------------------
