"""An expression written once as SQL text with placeholders, filled per call.

The parser spells Flink's functions in functions both engines have, and the Spark
translation spells DuckDB's meanings in Spark's functions, each as a template
(``sqlglot.parse_one("... :x ...")``) whose ``:name`` placeholders take the
call's arguments.
"""

from __future__ import annotations

from sqlglot import exp


def filled(template: exp.Expr, **values: exp.Expr) -> exp.Expr:
    """``template`` with each placeholder ``:name`` as a copy of ``values[name]``
    (in parentheses where it is an operation: it keeps its own precedence)."""
    kept = {k: exp.Paren(this=v) if isinstance(v, exp.Binary) else v for k, v in values.items()}
    return template.transform(
        lambda n: kept[n.name].copy() if isinstance(n, exp.Placeholder) else n
    )
