"""``JSON_VALUE`` as Flink reads it: a scalar's value, NULL otherwise.

DuckDB's ``json_value`` differs from Flink's ``JSON_VALUE`` (and from Spark's
``get_json_object``) twice: it raises on text that is not JSON ("Malformed
JSON"), which failed the whole query, a stream at its first such row, on every
runner (the query's functions are DuckDB's on Spark too); and it returns a
string scalar still quoted (``"x"`` for ``{"a": "x"}``). Flink returns NULL for
malformed input or a path to an object or array (``NULL ON ERROR``, ``NULL ON
EMPTY``, its defaults) and a string's characters. Each call is rewritten so
before anything plans the query, so both runners and the bounded query read
the same text.
"""

from __future__ import annotations

from sqlglot import exp

#: json_type of the values JSON_VALUE does not return (Flink: NULL).
NOT_SCALAR = ("ARRAY", "OBJECT")


def _flink_json_value(text: exp.Expression, path: exp.Expression) -> exp.Expression:
    """``CASE WHEN json_valid(text) THEN CASE WHEN json_type(text, path) NOT IN
    ('ARRAY', 'OBJECT') THEN json_extract_string(text, path) END END``: CASE, not
    AND, so that json_type never reads malformed text."""
    scalar = exp.Not(
        this=exp.In(
            this=exp.Anonymous(this="json_type", expressions=[text.copy(), path.copy()]),
            expressions=[exp.Literal.string(kind) for kind in NOT_SCALAR],
        )
    )
    value = exp.Anonymous(this="json_extract_string", expressions=[text.copy(), path.copy()])
    inner = exp.Case(ifs=[exp.If(this=scalar, true=value)])
    valid = exp.Anonymous(this="json_valid", expressions=[text.copy()])
    return exp.Case(ifs=[exp.If(this=valid, true=inner)])


def flink_json_values(query: exp.Expression) -> exp.Expression:
    """``query`` with each two-argument ``JSON_VALUE(text, path)`` as Flink reads it."""
    calls = [
        call
        for call in query.find_all(exp.Anonymous)
        if call.name.upper() == "JSON_VALUE" and len(call.expressions) == 2
    ]
    for call in reversed(calls):  # the innermost first: an outer call copies it rewritten
        call.replace(_flink_json_value(*call.expressions))
    return query
