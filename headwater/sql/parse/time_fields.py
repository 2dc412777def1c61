"""A field of a time, one node whatever the spelling: ``EXTRACT(DOW FROM t)``,
``DATE_PART('dow', t)``, ``DATEPART('dow', t)``, ``DAYOFWEEK(t)``, ``WEEKDAY(t)``.

Each parses to ``EXTRACT(field FROM t)`` with DuckDB's meaning of the field
(``DOW`` 0 for Sunday, ``ISODOW`` 7 for it, ``SECOND`` the whole seconds), which
the Spark translation writes in Spark's fields (:mod:`headwater.sql.plan.translate`).
sqlglot's own nodes would not: Spark's ``DAYOFWEEK`` counts Sunday as 1, its
``WEEKDAY`` Monday as 0, and its EXTRACT of SECOND keeps the fraction.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp


def _field(name: str, time: exp.Expr | None) -> exp.Extract:
    return exp.Extract(this=exp.var(name), expression=time)


def date_part(name: str) -> Callable[[list[exp.Expr]], exp.Expr]:
    """``DATE_PART('field', t)`` (spelled ``name``) as EXTRACT; with a field that
    is not a text literal, the call as written."""

    def build(args: list[exp.Expr]) -> exp.Expr:
        part = args[0] if args else None
        if len(args) == 2 and isinstance(part, exp.Literal) and part.is_string:
            return _field(part.name.upper(), args[1])
        return exp.Anonymous(this=name, expressions=args)

    return build


def field_of(field: str) -> Callable[[list[exp.Expr]], exp.Expr]:
    """``DAYOFWEEK(t)``, ``EPOCH(t)`` and their kin as ``EXTRACT(field FROM t)``."""
    return lambda args: _field(field, args[0] if len(args) == 1 else None)
