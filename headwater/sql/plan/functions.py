"""User functions: Python scalar functions a query calls by name (Flink's
Python UDFs, Spark's ``pandas_udf``).

A function is vectorized: it is called once per batch of rows with one pandas
Series per argument (a constant argument is a column repeating it, as Spark's
``pandas_udf`` sees a literal) and returns a Series (or array) of as many values,
converted to its declared SQL result type. Both runners call it the same way:
DuckDB (local runner, and the per-shard state on Spark) as an Arrow function,
Spark SQL as a ``pandas_udf``. NULLs reach the function (None/NaN), as in Spark.

Register functions with ``hw.sql(query, tables, functions=[...])`` or, in a
script, ``CREATE FUNCTION name AS 'module.attr' LANGUAGE PYTHON``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sqlglot import exp

from headwater.runners.duckdb_connections import connection
from headwater.sql.errors import SqlError, position
from headwater.sql.parse.dialect import Headwater

_HINT = (
    "Register a Python function: hw.sql(..., functions=[...]) or "
    "CREATE FUNCTION ... LANGUAGE PYTHON"
)


#: What users pass as ``functions=``: ScalarFunctions, a list or by name.
Functions = "Iterable[ScalarFunction] | Mapping[str, ScalarFunction] | None"


class FunctionError(SqlError):
    """A user function failed on its rows (raised, or returned values that do not fit)."""


@dataclass(frozen=True)
class ScalarFunction:
    """A Python scalar function for SQL: ``fn(*series) -> series``, declared
    argument and result types (SQL type names, e.g. ``VARCHAR``, ``BIGINT``,
    ``DECIMAL(10, 2)``): engines need them before any row arrives."""

    name: str
    fn: Callable[..., Any]
    result_type: str
    argument_types: tuple[str, ...]

    def apply(self, columns: list[pd.Series]) -> pd.Series:
        """``fn`` over one batch, checked: as many values as rows (FunctionError)."""
        rows = len(columns[0]) if columns else 0
        try:
            out = self.fn(*columns)
        except Exception as exc:  # the user's code: any failure fails the query, named
            raise FunctionError(
                f"function {self.name!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        if np.ndim(out) != 1 or len(out) != rows:
            got = f"{len(out)} values" if np.ndim(out) == 1 else f"a {type(out).__name__}"
            raise FunctionError(
                f"function {self.name!r} returned {got} for {rows} rows",
                hint="A function returns one value per row of the batch it is given",
            )
        return out if isinstance(out, pd.Series) else pd.Series(out)

    def arrow(self, columns: list[pa.ChunkedArray], arrow_type: pa.DataType) -> pa.Array:
        """``apply`` over Arrow columns (DuckDB's batch), as ``arrow_type``."""
        return self.converted(self.apply([c.to_pandas() for c in columns]), arrow_type)

    def arrow_type(self) -> pa.DataType:
        """The Arrow type of the result type (DuckDB's reading of it)."""
        with connection() as con:
            try:
                cast = con.sql(f"SELECT CAST(NULL AS {self.result_type}) AS r")
            except duckdb.Error:
                raise SqlError(
                    f"function {self.name!r}: result type {self.result_type!r} is not a SQL type",
                    hint="Declare a SQL type: BIGINT, DOUBLE, VARCHAR, DECIMAL(10, 2), ...",
                ) from None
            return cast.arrow().read_all().schema.field(0).type

    def converted(self, out: pd.Series, arrow_type: pa.DataType) -> pa.Array:
        """The function's values as ``arrow_type`` (FunctionError if they are not)."""
        try:
            return pa.array(out, type=arrow_type, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise FunctionError(
                f"function {self.name!r} returned values that are not {self.result_type}: {exc}",
                hint="Return values of the declared result_type (or declare another)",
            ) from None


def function(
    result_type: str, argument_types: Iterable[str], *, name: str | None = None
) -> Callable[[Callable[..., Any]], ScalarFunction]:
    """Decorator: a vectorized Python function as a :class:`ScalarFunction` (its
    name by default the Python name)::

        @hw.sql.function("BIGINT", ["VARCHAR", "VARCHAR"])
        def count_char(text, char):
            return text.str.count(char.iloc[0])
    """

    def wrap(fn: Callable[..., Any]) -> ScalarFunction:
        return ScalarFunction(name or fn.__name__, fn, result_type, tuple(argument_types))

    return wrap


def function_set(functions: Functions) -> dict[str, ScalarFunction]:
    """The functions passed (a list, or a mapping name -> function that renames
    them), by lower-case name."""
    if functions is None:
        return {}
    items = (
        [replace(f, name=n) if isinstance(f, ScalarFunction) else f for n, f in functions.items()]
        if isinstance(functions, Mapping)
        else list(functions)
    )
    out = {}
    for f in items:
        if not isinstance(f, ScalarFunction):
            raise SqlError(
                f"functions: a {type(f).__name__} is not a ScalarFunction",
                hint="Declare its types: hw.sql.function(result_type, argument_types)(fn)",
            )
        if not f.argument_types:
            raise SqlError(
                f"function {f.name!r} takes no arguments",
                hint="A function is called per batch of rows: give it at least one column",
            )
        if f.name.upper() in Headwater().parser_class.FUNCTIONS:
            raise SqlError(
                f"function {f.name!r}: SQL has a function of that name",
                hint="Name a Python function otherwise (functions={'my_name': fn})",
            )
        out[f.name.lower()] = f
    return out


def create_function(create: exp.Create) -> ScalarFunction:
    """The function of ``CREATE [TEMPORARY] FUNCTION name AS 'module.attr' LANGUAGE
    PYTHON`` (a ScalarFunction there, renamed); another language is refused."""
    name = create.this.name
    props = create.args.get("properties")
    languages = [
        p.name.upper()
        for p in (props.expressions if props else [])
        if isinstance(p, exp.LanguageProperty)
    ]
    language = languages[0] if languages else "JAVA"
    path = create.expression.name if isinstance(create.expression, exp.Literal) else ""
    if language != "PYTHON" or "." not in path:
        raise SqlError(
            f"CREATE FUNCTION {name}: headwater runs Python functions only ({language} {path!r})",
            *position(create.expression or create),
            f"{_HINT}, naming a ScalarFunction as 'module.attr'",
        )
    return import_function(name, path, f"CREATE FUNCTION {name}", *position(create.expression))


def import_function(
    name: str, path: str, what: str, line: int | None = None, col: int | None = None
) -> ScalarFunction:
    """The ScalarFunction at ``path`` ('module.attr'), called ``name`` in SQL;
    SqlError (``what``: where it was named) if it cannot be imported."""
    module, _, attr = path.rpartition(".")
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SqlError(f"{what}: cannot import {path!r}: {exc}", line, col) from None
    return next(iter(function_set({name: value}).values()))


#: A FunctionError in an engine's message (DuckDB's, or a Spark worker's traceback).
_RAISED = re.compile(r"\bFunctionError: (?P<message>[^\n]*)")


def function_error(message: str) -> FunctionError | None:
    """The FunctionError a user function raised inside an engine (DuckDB, a Spark
    worker: its message carries it), else None."""
    found = _RAISED.search(message)
    return FunctionError(found["message"]) if found else None


def register_duckdb(con, functions: Iterable[ScalarFunction]) -> None:
    """Register ``functions`` in the DuckDB connection ``con`` (vectorized: Arrow
    batches in and out; NULLs passed to the function)."""
    for f in functions:
        con.create_function(
            f.name,
            _batch_call(f, f.arrow_type()),
            list(f.argument_types),
            f.result_type,
            type="arrow",
            null_handling="special",
            side_effects=False,
        )


def called(query: exp.Expr, functions: Mapping[str, ScalarFunction]) -> tuple[ScalarFunction, ...]:
    """The user functions ``query`` calls (by name, as SQL: case-insensitive)."""
    names = {f.name.lower() for f in query.find_all(exp.Anonymous)}
    return tuple(f for n, f in functions.items() if n in names)


def _batch_call(f: ScalarFunction, arrow_type: pa.DataType) -> Callable[..., pa.Array]:
    """``f`` as DuckDB calls an Arrow function: one positional parameter per
    argument (DuckDB counts them in the signature)."""

    def call(*columns: pa.ChunkedArray) -> pa.Array:
        return f.arrow(list(columns), arrow_type)

    kind = inspect.Parameter.POSITIONAL_ONLY
    params = [inspect.Parameter(f"arg{i}", kind) for i in range(len(f.argument_types))]
    call.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return call


def register_spark(spark, functions: Iterable[ScalarFunction]) -> None:
    """Register ``functions`` in the SparkSession as ``pandas_udf``s (Spark SQL's
    vectorized functions: a batch of pandas Series in, a Series out)."""
    from pyspark.sql.functions import pandas_udf

    for f in functions:
        result = exp.DataType.build(f.result_type, dialect="duckdb").sql("spark")
        spark.udf.register(f.name, pandas_udf(_series_call(f, f.arrow_type()), result))


def _series_call(f: ScalarFunction, arrow_type: pa.DataType) -> Callable[..., pd.Series]:
    """``f`` as Spark calls a scalar ``pandas_udf``: one Series parameter per argument
    (Spark reads the kind of function from the type hints); its values checked
    as on DuckDB (of the result type)."""

    def call(*columns: pd.Series) -> pd.Series:
        return f.converted(f.apply(list(columns)), arrow_type).to_pandas()

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter(f"arg{i}", kind, annotation=pd.Series)
        for i in range(len(f.argument_types))
    ]
    call.__signature__ = inspect.Signature(params, return_annotation=pd.Series)  # type: ignore[attr-defined]
    call.__annotations__ = {**{p.name: pd.Series for p in params}, "return": pd.Series}
    return call
