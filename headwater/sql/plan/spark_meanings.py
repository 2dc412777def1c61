"""Functions DuckDB and Spark SQL both have under one name, with another meaning.

A query on Spark must mean what the bounded query means (DuckDB's reading of
it): where Spark's function of the same name gives other values, and no
rewrite gives DuckDB's, the query is refused on the Spark runner at the call,
before it runs, rather than answer otherwise. (Those a rewrite fixes are in
:data:`headwater.sql.plan.translate.SPARK_REWRITES`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.plan.calls import first_call

_LOCAL = "run the query with runner='local'"


@dataclass(frozen=True)
class OtherMeaning:
    """Why Spark's function of that name differs, and what to write instead."""

    why: str
    hint: str


#: By function name, as written (any case).
OTHER_MEANINGS: dict[str, OtherMeaning] = {
    "hash": OtherMeaning(
        "DuckDB's and Spark's HASH are different hash functions",
        "Hash with MD5(CAST(x AS VARCHAR)) or SHA256(...), the same on both",
    ),
    "initcap": OtherMeaning(
        "Spark's INITCAP starts a word after a space only, DuckDB's after punctuation too",
        f"Capitalize with UPPER/LOWER and SUBSTRING, or {_LOCAL}",
    ),
    "kurtosis": OtherMeaning(
        "DuckDB's KURTOSIS is a sample's (bias-corrected), Spark's the population's",
        f"Write KURTOSIS_POP(x) for the population's, or {_LOCAL}",
    ),
    "skewness": OtherMeaning(
        "DuckDB's SKEWNESS is a sample's (bias-corrected), Spark's the population's",
        f"Compute it from SUM and COUNT of powers of x, or {_LOCAL}",
    ),
}


def check_spark_meanings(query: exp.Expression) -> None:
    """SqlError at the first call in ``query`` whose function means another thing
    in Spark SQL (:data:`OTHER_MEANINGS`)."""
    for name, other in OTHER_MEANINGS.items():
        call = first_call(query, name)
        if call is not None:
            raise SqlError(
                f"{name.upper()} means another thing on Spark: {other.why}",
                *position(call),
                other.hint,
            )
