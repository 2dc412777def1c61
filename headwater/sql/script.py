"""SQL scripts: ``CREATE TABLE`` sources and sinks, queries, ``INSERT INTO``.

A script declares its tables (and views: ``CREATE VIEW v AS SELECT ...`` names a
query, expanded as a subquery where a later statement reads ``v``), then runs
queries::

    CREATE TABLE Bid (bidtime TIMESTAMP, price DOUBLE, item VARCHAR,
                      WATERMARK FOR bidtime AS bidtime - INTERVAL '5' SECOND)
      WITH ('path' = 'bids/', 'format' = 'parquet');
    CREATE TABLE Winners (wstart TIMESTAMP, wend TIMESTAMP, price DOUBLE, item VARCHAR)
      WITH ('format' = 'table', 'path' = 'results.duckdb');     -- or a postgresql:// URL
    CREATE TABLE WinnerLog (...) WITH ('format' = 'changelog', 'path' = 'winners/');
    INSERT INTO Winners SELECT ... EMIT STREAM;

``CREATE [TEMPORARY] FUNCTION f AS 'module.attr' LANGUAGE PYTHON`` imports a
Python function (a :class:`~headwater.sql.plan.functions.ScalarFunction`) that
the later queries call as ``f``.

Sources (a table with ``WATERMARK FOR``, or ``'format'`` = parquet / csv / json
/ replay with a ``'path'``): ``replay`` is a recorded stream (JSON lines of
rows and watermarks); parquet, csv and json are files. On Spark a directory
is a stream of the files that arrive in it; a file is a bounded table (the
local runner reads what is there). ``'allowed_lateness'`` sets a source's
allowed lateness (``'5 minutes'``).

Sinks (``'format'`` = ``changelog``: the changelog as Parquet, one directory
per batch; ``table``: the current rows, kept by applying the changelog, in
DuckDB (a file path) or PostgreSQL (a URL), ``'table'`` naming the table).
A plain query's result is returned (the command line prints it). The rows
each query drops (late beyond the allowed lateness, null event time) go to
``dead_letters(name)``, a sink ``(batch, batch_id)`` per query name: pandas
frames on the local runner, Spark DataFrames per micro-batch on Spark streams.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pandas as pd
from sqlglot import exp

from headwater.sql.bind import bind
from headwater.sql.errors import SqlError, position
from headwater.sql.execute.local import result_types
from headwater.sql.execute.sink_types import fit_to_sink
from headwater.sql.execute.sources import is_sink, local_source, make_sink
from headwater.sql.parse.ddl import SourceDef, source_def
from headwater.sql.parse.dialect import parse
from headwater.sql.plan.catalog import Table
from headwater.sql.plan.functions import Functions, create_function, function_set

#: A sink ``(batch, batch_id)`` for the dead letters of the query of a name.
DeadLetters = Callable[[str], Callable[[Any, int], None]]


def run_script(
    text: str,
    tables: Mapping[str, Any] | None = None,
    *,
    runner: str = "local",
    dead_letters: DeadLetters | None = None,
    functions: Functions = None,
    sinks: dict[str, Any] | None = None,
    **options,
) -> Iterator[pd.DataFrame]:
    """Run a script's statements in order; yields the result of each plain query.
    ``functions``: Python functions its queries call, with those of its ``CREATE
    FUNCTION ... LANGUAGE PYTHON``; ``options["state_ttl"]``: every query's state
    time-to-live (:mod:`headwater.sql.plan.ttl`); ``options["fast_path"]``: False
    keeps every query off the fast path. ``sinks``: a dict given each sink the
    script declares, by its table's name in lower case, so that the caller can
    read what a sink took (a blackhole's ``rows``)."""
    tables = dict(tables or {})
    options = dict(options)
    fast_path = options.pop("fast_path", True)
    ttl = options.get("state_ttl")
    known = function_set(functions)
    sinks = {} if sinks is None else sinks
    sink_columns: dict[str, list[str]] = {}
    sink_types: dict[str, dict[str, str]] = {}
    views: dict[str, exp.Query] = {}
    declared: dict[str, SourceDef] = {}
    binding = {"runner": runner, "functions": known, "state_ttl": ttl, "fast_path": fast_path}
    for statement in parse(text):
        statement = with_views(statement, views)
        if isinstance(statement, exp.Create) and statement.kind == "VIEW":
            views[statement.this.name.lower()] = statement.expression
            continue
        if isinstance(statement, exp.Create) and statement.kind == "FUNCTION":
            known[statement.this.name.lower()] = create_function(statement)
            continue
        if isinstance(statement, exp.Create):
            d = source_def(statement)
            if is_sink(d):
                sinks[d.name.lower()] = make_sink(d)
                sink_columns[d.name.lower()] = list(d.columns)
                sink_types[d.name.lower()] = d.columns
            else:
                declared[d.name.lower()] = d
            continue
        _read_sources(statement, declared, tables, runner, options)
        if isinstance(statement, exp.Insert):
            target = statement.this.name if isinstance(statement.this, exp.Table) else ""
            sink = sinks.get(target.lower())
            if sink is None:
                raise SqlError(
                    f"INSERT INTO {target!r}: no such sink",
                    *position(statement.this),
                    "Declare it with CREATE TABLE ... WITH ('format' = 'changelog' | 'table', ...)",
                )
            select = by_position(statement.expression, sink_columns[target.lower()])
            query = bind(select, tables, name=target, **binding)
            declared = sink_types[target.lower()]
            fitted = fit_to_sink(select, result_types(query.plan), declared, target)
            if fitted is not select:  # cast to the sink's types (store assignment)
                query = bind(fitted, tables, name=target, **binding)
            letters = None if dead_letters is None else dead_letters(query.plan.name)
            query.write(sink, dead_letter_sink=letters, **options)
            continue
        query = bind(statement, tables, **binding)
        yield query.to_pandas(options.get("as_of"))
        if dead_letters is not None:
            query.write_dead_letters(dead_letters(query.plan.name), options.get("as_of"))


def by_position(query: exp.Expr, columns: list[str]) -> exp.Expr:
    """An INSERT's query with each result column whose name it repeats
    (``B.dateTime, A.dateTime``) named as the sink's column at its position:
    INSERT INTO fills columns by position, as in Flink. The other columns keep
    their names (a GROUP BY may read an alias)."""
    items = query.expressions if isinstance(query, exp.Select) else []
    if len(items) != len(columns) or any(i.is_star for i in items):
        return query
    names = Counter(i.alias_or_name.lower() for i in items)
    if all(n == 1 for n in names.values()):
        return query
    query = query.copy()
    for item, name in zip(list(query.expressions), columns, strict=True):
        if names[item.alias_or_name.lower()] > 1:
            item.replace(exp.alias_(item.unalias().copy(), name, quoted=True))
    return query


def with_views(statement: exp.Expr, views: Mapping[str, exp.Query]) -> exp.Expr:
    """``statement`` with each table that names a view (``CREATE VIEW v AS SELECT ...``)
    replaced by the view's query as a subquery of that name, as Flink expands views."""
    if not views:
        return statement

    def expand(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Table) or node.db or node.name.lower() not in views:
            return node
        alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name))
        return exp.Subquery(this=views[node.name.lower()].copy(), alias=alias.copy())

    return statement.transform(expand)


def _read_sources(
    statement: exp.Expr,
    declared: dict[str, SourceDef],
    tables: dict[str, Any],
    runner: str,
    options: dict,
) -> None:
    """Read the declared sources ``statement`` reads that are not read yet, into
    ``tables``: a script reads (and plans over) only the tables its queries read, as
    a Flink script's DDL reads nothing until a query runs."""
    for name in {t.name.lower() for t in statement.find_all(exp.Table)} & declared.keys():
        d = declared.pop(name)
        tables[d.name] = _source(d, runner, options)


def _source(d: SourceDef, runner: str, options: dict) -> Table:
    if runner == "spark":
        from headwater.sql.execute.spark import spark_source

        table = spark_source(d, options)
    else:
        table = local_source(d)
    table.primary_key = d.primary_key
    return table
