"""A call whose arguments have types no form of the function takes, as a SqlError.

DuckDB says ``No function matches ... 'sum(VARCHAR)'`` with neither the column
nor the position; the user needs both: the error points at the call, names the
function, the argument's column and its type, the types the function takes and
how to cast. The check runs while binding a query to empty tables of its real
types, so it is the same error on every runner (Spark too) before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from sqlglot import exp

from headwater.sql.errors import SqlError, position

#: DuckDB's message and its candidate forms (``\tsum(BIGINT) -> HUGEINT``).
_NO_MATCH = re.compile(
    r"No function matches the given name and argument types '(?P<name>.+?)\((?P<types>.*)\)'"
)
_CANDIDATE = re.compile(r"^\t(?P<name>[^\t(]+)\((?P<types>.*)\) -> ", re.MULTILINE)
#: Operators DuckDB reports as functions, by the node sqlglot parses them to.
_OPERATORS: dict[str, type[exp.Expr]] = {
    "+": exp.Add,
    "-": exp.Sub,
    "*": exp.Mul,
    "/": exp.Div,
    "%": exp.Mod,
    "||": exp.DPipe,
}
#: The type a cast suggests, the first of these a function takes.
_PREFERRED = ("DOUBLE", "TIMESTAMP", "VARCHAR", "BIGINT", "DATE", "INTERVAL")


#: DuckDB's own types, not SQL's: left out of the types a function is said to take.
_ENGINE_TYPES = frozenset({"HUGEINT", "UHUGEINT", "BIGNUM", "VARINT", "TIME_NS", "ANY[]"})


def _shown_types(taken: list[str]) -> str:
    shown = [
        t for t in taken if t not in _ENGINE_TYPES and not re.match(r"U(TINY|SMALL|BIG)?INT", t)
    ]
    return ", ".join(shown or taken)


def _split(types: str) -> list[str]:
    return [t.strip() for t in types.split(",")] if types.strip() else []


def _bad_argument(given: list[str], forms: list[list[str]]) -> tuple[int, list[str]]:
    """The first argument whose type no form takes there, and the types taken there."""
    for i, kind in enumerate(given):
        taken = list(dict.fromkeys(f[i] for f in forms if len(f) > i))
        if kind.removesuffix("_LITERAL") not in taken and kind not in taken:
            return i, taken
    return 0, list(dict.fromkeys(f[0] for f in forms if f))


def _spelled(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name
    if isinstance(node, exp.Func):
        return node.sql_name()
    return next((op for op, kind in _OPERATORS.items() if isinstance(node, kind)), "")


def _calls(query: exp.Expr, name: str) -> list[exp.Expr]:
    """The calls of ``name`` in ``query``, in the order they are written."""
    kinds = (_OPERATORS[name],) if name in _OPERATORS else (exp.Func,)
    found = [c for c in query.find_all(*kinds) if _spelled(c).lower() == name.lower()]
    placed = [(position(c), i) for i, c in enumerate(found)]
    order = sorted(range(len(found)), key=lambda i: (placed[i][0][0] is None, placed[i]))
    return [found[i] for i in order]


def first_call(query: exp.Expr, name: str) -> exp.Expr | None:
    """The first call of function ``name`` written in ``query`` (None: no call)."""
    calls = _calls(query, name)
    return calls[0] if calls else None


def _arguments(call: exp.Expr) -> Iterator[exp.Expr]:
    for value in call.args.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expr):
                yield item


def _culprit(calls: list[exp.Expr], kind: str, types: Mapping[str, str]):
    """(call, argument column) of the first call with a column of type ``kind``."""
    for call in calls:
        for arg in _arguments(call):
            if isinstance(arg, exp.Column) and types.get(arg.name.lower()) == kind:
                return call, arg
    return (calls[0] if calls else None), None


def argument_error(message: str, query: exp.Expr, types: Mapping[str, str]) -> SqlError | None:
    """DuckDB's "no function matches" as a SqlError at the call (None: another
    error). ``types``: the DuckDB type of each column (lower-case name) in scope."""
    found = _NO_MATCH.search(message)
    if found is None:
        return None
    name, given = found["name"], _split(found["types"])
    forms = [_split(m["types"]) for m in _CANDIDATE.finditer(message) if m["name"] == name]
    index, taken = _bad_argument(given, forms)
    kind = given[index].removesuffix("_LITERAL") if given else ""
    call, column = _culprit(_calls(query, name), kind, types)
    shown = _spelled(call) if call is not None else name.upper()
    what = repr(column.sql()) if column is not None else f"argument {index + 1}"
    target = next((t for t in _PREFERRED if t in taken), taken[0] if taken else "DOUBLE")
    line, col = position(call) if call is not None else (None, None)
    return SqlError(
        f"{shown} cannot take {what} of type {kind}: {shown} takes {_shown_types(taken)}",
        line,
        col,
        f"Cast it, e.g. CAST({column.sql() if column is not None else '...'} AS {target})",
    )
