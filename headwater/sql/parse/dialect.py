"""headwater's streaming SQL, as a sqlglot dialect.

The language is the one of "One SQL to Rule Them All" (Begoli et al., 2019):
windowing table functions in FROM (``Tumble``, ``Hop``, ``Session``, also in
Flink's spelling ``TABLE(TUMBLE(TABLE t, ...))``, and Flink's ``CUMULATE``) and
an ``EMIT`` clause that ends a query. Each TVF spelling parses to one
:class:`WindowTVF` node and the EMIT clause to an :class:`Emit` node in
``query.args["emit"]``, so the planner sees one shape whatever was written.
The rest is sqlglot's ANSI-ish default dialect; CREATE TABLE accepts
``WATERMARK FOR ts AS ts - INTERVAL ...``.

Every problem is a :class:`SqlError` positioned at the offending token.
"""

from __future__ import annotations

import re
import typing as t

import sqlglot
from sqlglot import exp, generator
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.parser import build_logarithm
from sqlglot.parsers.base import BaseParser
from sqlglot.tokens import Token, Tokenizer, TokenType

from headwater.sql.errors import SqlError, position, token_position
from headwater.sql.parse.ddl import SourceDef, interval_ms, interval_sql, source_def
from headwater.sql.parse.group_windows import GroupWindow, to_window_tvfs
from headwater.sql.parse.templates import filled
from headwater.sql.parse.time_fields import date_part, field_of
from headwater.sql.parse.time_units import date_diff, timestamp_add, timestamp_diff

__all__ = [
    "Emit",
    "Headwater",
    "SourceDef",
    "SqlError",
    "WindowTVF",
    "parse",
    "parse_query",
    "position",
    "source_def",
]


class WindowTVF(exp.Expression):
    """A windowing table function in FROM (or JOIN), normalized from every spelling.

    ``size``/``slide``/``step``/``offset``/``gap`` are ints (ms); ``flink`` tells which
    window columns it adds (Flink's window_start/window_end/window_time, or
    the paper's wstart/wend).
    """

    arg_types = {
        "kind": True,
        "this": True,
        "timecol": True,
        "size": False,
        "slide": False,
        "step": False,
        "offset": False,
        "gap": False,
        "keys": False,
        "flink": False,
        "alias": False,
    }


class Emit(exp.Expression):
    """A query's EMIT clause: ``stream`` (a changelog), AFTER WATERMARK, AFTER DELAY (ms)."""

    arg_types = {"stream": False, "watermark": False, "delay": False}


WINDOW_KINDS = ("TUMBLE", "HOP", "SESSION", "CUMULATE")

#: Parameters in positional order, per (Flink spelling?, kind). Flink's HOP takes
#: the slide before the size, the paper's Hop the size (dur) before the hop.
_SIGNATURES: dict[tuple[bool, str], tuple[str, ...]] = {
    (False, "TUMBLE"): ("DATA", "TIMECOL", "DUR", "OFFSET"),
    (False, "HOP"): ("DATA", "TIMECOL", "DUR", "HOPSIZE", "OFFSET"),
    (False, "SESSION"): ("DATA", "TIMECOL", "GAP", "KEYS"),
    (True, "TUMBLE"): ("DATA", "TIMECOL", "SIZE", "OFFSET"),
    (True, "HOP"): ("DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"),
    (True, "SESSION"): ("DATA", "TIMECOL", "GAP"),
    (True, "CUMULATE"): ("DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"),
}
#: The WindowTVF arg each parameter fills.
_PARAM_ARG = {
    "DATA": "this",
    "TIMECOL": "timecol",
    "DUR": "size",
    "SIZE": "size",
    "HOPSIZE": "slide",
    "SLIDE": "slide",
    "STEP": "step",
    "OFFSET": "offset",
    "GAP": "gap",
    "KEYS": "keys",
}
_OPTIONAL = frozenset({"OFFSET", "KEYS"})
_EXAMPLES = {"DATA": "TABLE(t)", "TIMECOL": "DESCRIPTOR(ts)", "KEYS": "DESCRIPTOR(k)"}
_EXAMPLE_INTERVAL = "INTERVAL '1' MINUTE"

_EMIT_HINT = (
    "Valid forms: EMIT STREAM, EMIT [STREAM] AFTER WATERMARK, "
    "EMIT [STREAM] AFTER DELAY INTERVAL '1' MINUTE, "
    "EMIT [STREAM] AFTER DELAY INTERVAL '1' MINUTE AND AFTER WATERMARK; "
    "EMIT comes last, after ORDER BY and LIMIT"
)
_SCRIPT_HINT = (
    "A script holds SELECT queries, CREATE TABLE, CREATE VIEW ... AS SELECT, "
    "CREATE FUNCTION ... LANGUAGE PYTHON and INSERT INTO ... SELECT"
)


class _TvfArg(t.NamedTuple):
    """One argument of a windowing TVF as written, with the tokens errors point at."""

    name: Token | None
    at: Token
    value: exp.Expr
    keys: list[exp.Expr] | None  # PARTITION BY after a TABLE argument


def _shown(param: str, flink: bool) -> str:
    return param if flink else param.lower()


def _arg_error(message: str, arg: _TvfArg, hint: str = "") -> SqlError:
    return SqlError(message, *token_position(arg.at), hint)


def _data(what: str, arg: _TvfArg) -> exp.Expr:
    if isinstance(arg.value, (exp.Table, exp.Subquery)):
        return arg.value
    raise _arg_error(
        f"{what} must be a table, written TABLE(name) or TABLE name",
        arg,
        "A subquery works too: TABLE(SELECT ...) or (SELECT ...)",
    )


def _columns(what: str, arg: _TvfArg, columns: list[exp.Expr]) -> list[exp.Column]:
    if not columns or not all(isinstance(c, exp.Column) for c in columns):
        raise _arg_error(f"{what} must name columns", arg, "Write DESCRIPTOR(column)")
    return t.cast(list[exp.Column], columns)


def _descriptor(what: str, arg: _TvfArg) -> list[exp.Column]:
    value = arg.value
    if not (isinstance(value, exp.Anonymous) and value.name.upper() == "DESCRIPTOR"):
        raise _arg_error(f"{what} must be DESCRIPTOR(column)", arg, "Write DESCRIPTOR(column)")
    return _columns(what, arg, value.expressions)


def _timecol(what: str, arg: _TvfArg) -> exp.Column:
    columns = _descriptor(what, arg)
    if len(columns) != 1:
        raise _arg_error(f"{what} names one event-time column", arg, "Write DESCRIPTOR(column)")
    return columns[0]


def _duration(what: str, arg: _TvfArg) -> int:
    value = arg.value.unnest()
    if not isinstance(value, (exp.Interval, exp.Add)):
        raise _arg_error(f"{what} must be an INTERVAL", arg, f"Write e.g. {_EXAMPLE_INTERVAL}")
    return interval_ms(value)


def _positive(what: str, arg: _TvfArg) -> int:
    ms = _duration(what, arg)
    if ms <= 0:
        raise _arg_error(f"{what} must be positive, not {arg.value.sql()}", arg)
    return ms


#: How each WindowTVF arg is read from its argument, given a description for errors.
_READERS: dict[str, t.Callable[[str, _TvfArg], t.Any]] = {
    "this": _data,
    "timecol": _timecol,
    "keys": _descriptor,
    "size": _positive,
    "slide": _positive,
    "step": _positive,
    "gap": _positive,
    "offset": _duration,
}


def _usage(call: Token, signature: tuple[str, ...], flink: bool) -> str:
    """A correct call, named argument by argument, for hints."""
    text = ""
    for param in signature:
        arg = f"{_shown(param, flink)} => {_EXAMPLES.get(param, _EXAMPLE_INTERVAL)}"
        text += f"[, {arg}]" if param in _OPTIONAL else f"{', ' if text else ''}{arg}"
    return f"Write TABLE({call.text}({text}))" if flink else f"Write {call.text}({text})"


def _param(call: Token, signature: tuple[str, ...], index: int, arg: _TvfArg, flink: bool) -> str:
    """The parameter an argument binds to: by its name, else by its position."""
    if arg.name is not None:
        param = arg.name.text.upper()
        if param not in signature:
            names = ", ".join(_shown(p, flink) for p in signature)
            raise SqlError(
                f"{call.text} has no argument named {arg.name.text}",
                *token_position(arg.name),
                f"Its arguments are {names}",
            )
        return param
    if index >= len(signature):
        raise _arg_error(
            f"{call.text} takes at most {len(signature)} arguments",
            arg,
            _usage(call, signature, flink),
        )
    return signature[index]


def _bind(call: Token, flink: bool, kind: str, args: list[_TvfArg]) -> dict[str, _TvfArg]:
    signature = _SIGNATURES[(flink, kind)]
    given: dict[str, _TvfArg] = {}
    for index, arg in enumerate(args):
        param = _param(call, signature, index, arg, flink)
        if param in given:
            raise SqlError(
                f"{call.text}'s {_shown(param, flink)} argument is given twice",
                *token_position(arg.name or arg.at),
            )
        given[param] = arg
    missing = [p for p in signature if p not in given and p not in _OPTIONAL]
    if missing:
        raise SqlError(
            f"{call.text} is missing its {_shown(missing[0], flink)} argument",
            *token_position(call),
            _usage(call, signature, flink),
        )
    return given


def _partition_keys(call: Token, kind: str, given: dict[str, _TvfArg]) -> list[exp.Column] | None:
    """Keys of Flink's ``SESSION(TABLE t PARTITION BY k, ...)``."""
    for param, arg in given.items():
        if arg.keys is None:
            continue
        if param != "DATA" or kind != "SESSION":
            raise _arg_error("PARTITION BY only follows the data table of SESSION", arg)
        if "KEYS" in given:
            raise _arg_error(f"{call.text} has keys both in PARTITION BY and in keys =>", arg)
        return _columns(f"the PARTITION BY of {call.text}", arg, arg.keys)
    return None


def _window_tvf(kind: str, flink: bool, call: Token, args: list[_TvfArg]) -> WindowTVF:
    """Bind the arguments to their parameters and read each as the kind it must be."""
    given = _bind(call, flink, kind, args)
    values: dict[str, t.Any] = {}
    for param, arg in given.items():
        target = _PARAM_ARG[param]
        values[target] = _READERS[target](f"{call.text}'s {_shown(param, flink)} argument", arg)
    keys = _partition_keys(call, kind, given)
    if keys is not None:
        values["keys"] = keys
    if kind == "CUMULATE" and values["size"] % values["step"]:
        raise _arg_error(
            f"{call.text}'s STEP ({given['STEP'].value.sql()}) must divide its SIZE "
            f"({given['SIZE'].value.sql()}): the last window of each period is the whole SIZE",
            given["STEP"],
            "Choose a STEP that divides the SIZE, e.g. INTERVAL '1' MINUTE of INTERVAL '10' MINUTE",
        )
    return WindowTVF(kind=kind, flink=flink, **values)


#: Java date-pattern letters (Flink's DATE_FORMAT) as strftime directives, which
#: sqlglot writes as DuckDB's strftime and back as Spark's date_format pattern.
_JAVA_DATE_LETTERS = {
    "yyyy": "%Y",
    "yy": "%y",
    "MM": "%m",
    "dd": "%d",
    "HH": "%H",
    "mm": "%M",
    "ss": "%S",
}


def _strftime(pattern: exp.Expr) -> exp.Literal:
    """A literal Java date pattern (``'yyyy-MM-dd'``) as a strftime format."""
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise SqlError(
            "DATE_FORMAT's pattern must be a string literal",
            *position(pattern),
            "Write e.g. DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss')",
        )
    text = ""
    for run in re.finditer(r"([A-Za-z])\1*|[^A-Za-z]+", pattern.name):
        piece = run.group()
        if piece[0].isalpha() and piece not in _JAVA_DATE_LETTERS:
            known = ", ".join(_JAVA_DATE_LETTERS)
            raise SqlError(
                f"DATE_FORMAT's pattern {piece!r} is not supported",
                *position(pattern),
                f"The pattern letters read are {known}",
            )
        text += _JAVA_DATE_LETTERS.get(piece, piece.replace("%", "%%"))
    return exp.Literal.string(text)


def _date_format(args: list[exp.Expr]) -> exp.Expr:
    """Flink's ``DATE_FORMAT(ts, 'yyyy-MM-dd')``: a timestamp as text by a Java pattern."""
    if len(args) != 2:
        raise SqlError(
            "DATE_FORMAT takes a timestamp and a pattern",
            *position(args[0]) if args else (None, None),
            "Write e.g. DATE_FORMAT(ts, 'yyyy-MM-dd')",
        )
    return exp.TimeToStr(this=args[0], format=_strftime(args[1]))


#: Flink's SPLIT_INDEX(s, sep, i): the 0-based i-th part, NULL past the last part
#: (DuckDB's and Spark's SPLIT_PART are 1-based and give '' there), and NULL for an
#: empty ``s`` (Flink splits it into no part: commons-lang's
#: splitByWholeSeparatorPreserveAllTokens; SPLIT_PART gives '').
SPLIT_INDEX = "split_index"
_SPLIT_INDEX = sqlglot.parse_one(
    "CASE WHEN :i >= 0 AND LENGTH(:s) > 0 "
    "AND :i < (LENGTH(:s) - LENGTH(REPLACE(:s, :sep, ''))) / LENGTH(:sep) + 1 "
    "THEN SPLIT_PART(:s, :sep, :i + 1) END"
)


def _split_index(args: list[exp.Expr]) -> exp.Expr:
    """Flink's ``SPLIT_INDEX(s, sep, index)`` as SPLIT_PART, which both engines have."""
    if len(args) != 3:
        raise SqlError(
            "SPLIT_INDEX takes a string, a separator and a 0-based index",
            *position(args[0]) if args else (None, None),
            "Write e.g. SPLIT_INDEX(url, '/', 3)",
        )
    case = filled(_SPLIT_INDEX, s=args[0], sep=args[1], i=args[2])
    case.meta[SPLIT_INDEX] = True  # Spark's translation splits once (translate.py)
    return case


#: Flink's JSON_VALUE(s, path): NULL for text that is not JSON or a path to an
#: object or array (NULL ON ERROR, NULL ON EMPTY: its defaults), a string's
#: characters. DuckDB's json_value raises on malformed text (one row failed the
#: query) and keeps a string's quotes. CASE, not AND: json_type never reads
#: malformed text.
_JSON_VALUE = sqlglot.parse_one(
    "CASE WHEN JSON_VALID(:s) THEN CASE WHEN JSON_TYPE(:s, :path) NOT IN ('ARRAY', 'OBJECT') "
    "THEN JSON_EXTRACT_STRING(:s, :path) END END"
)


def _json_value(args: list[exp.Expr]) -> exp.Expr:
    """Flink's ``JSON_VALUE(s, path)`` in functions both runners' DuckDB has."""
    if len(args) != 2:
        raise SqlError(
            "JSON_VALUE takes a JSON text and a path",
            *position(args[0]) if args else (None, None),
            "Write e.g. JSON_VALUE(payload, '$.price')",
        )
    return filled(_JSON_VALUE, s=args[0], path=args[1])


def _regexp_extract(args: list[exp.Expr], dialect: Dialect) -> exp.Expr:
    """Flink's ``REGEXP_EXTRACT(s, pattern[, group])``: the group of the first match
    (0, the default: the whole match), NULL when nothing matches, where DuckDB's
    and Spark's REGEXP_EXTRACT give ''."""
    if len(args) not in (2, 3):
        raise SqlError(
            "REGEXP_EXTRACT takes a string, a pattern and an optional group index",
            *position(args[0]) if args else (None, None),
            "Write e.g. REGEXP_EXTRACT(url, 'id=([0-9]+)', 1)",
        )
    group = args[2] if len(args) == 3 else exp.Literal.number(0)
    extract = exp.RegexpExtract(this=args[0], expression=args[1], group=group)
    matches = exp.RegexpLike(this=args[0].copy(), expression=args[1].copy())
    return exp.Case(ifs=[exp.If(this=matches, true=extract)])


#: Flink's FLOOR / CEIL (ts TO unit) units, as DATE_TRUNC's (same meaning in DuckDB
#: and Spark); the step CEIL adds (a quarter is three months). A week is not one:
#: Flink's starts on Sunday, DuckDB's and Spark's DATE_TRUNC on Monday.
_TIME_UNITS = {
    "SECOND": ("1", "SECOND"),
    "MINUTE": ("1", "MINUTE"),
    "HOUR": ("1", "HOUR"),
    "DAY": ("1", "DAY"),
    "MONTH": ("1", "MONTH"),
    "QUARTER": ("3", "MONTH"),
    "YEAR": ("1", "YEAR"),
}


def _floor_ceil_time(node: exp.Floor | exp.Ceil, at: Token) -> exp.Expr:
    """Flink's ``FLOOR(ts TO DAY)`` as ``DATE_TRUNC('DAY', ts)`` (a TimestampTrunc:
    Spark's DATE_TRUNC, not its TRUNC of dates); ``CEIL(ts TO DAY)`` as the next
    boundary, ``ts`` itself when it is one (Calcite's). Without TO: the number's."""
    to = node.args.get("to")
    if to is None:
        return node
    unit = to.name.upper()
    if unit not in _TIME_UNITS:
        units = ", ".join(_TIME_UNITS)
        raise SqlError(
            f"{type(node).__name__.upper()}(... TO {unit}) is not supported",
            *token_position(at),
            f"The units read are {units}",
        )
    trunc = exp.TimestampTrunc(this=node.this.copy(), unit=exp.Literal.string(unit))
    if isinstance(node, exp.Floor):
        trunc.meta["written"] = "FLOOR"  # the explain shows it as written
        return trunc
    count, step = _TIME_UNITS[unit]
    on_boundary = exp.EQ(this=trunc.copy(), expression=node.this.copy())
    following = exp.Add(
        this=trunc, expression=exp.Interval(this=exp.Literal.string(count), unit=exp.var(step))
    )
    return exp.Case(ifs=[exp.If(this=on_boundary, true=node.this.copy())], default=following)


def _logarithm(args: list[exp.Expr], dialect: Dialect) -> exp.Expr:
    """``LOG(base, x)``; ``LOG(x)`` alone is refused: it is the natural logarithm in
    Flink and Spark, the base-10 one in DuckDB and PostgreSQL."""
    if len(args) == 1:
        raise SqlError(
            "LOG(x) is the natural logarithm in Flink and Spark, and base 10 in DuckDB",
            *position(args[0]),
            "Write LN(x), LOG10(x) or LOG(base, x)",
        )
    return build_logarithm(args, dialect)


def _is_group_window(args: list[_TvfArg]) -> bool:
    """``TUMBLE(t, INTERVAL ...)``: Flink's legacy group window (in GROUP BY), whose
    arguments are a column and intervals, never named, a table or a DESCRIPTOR."""
    return (
        bool(args)
        and all(a.name is None and a.keys is None for a in args)
        and isinstance(args[0].value, exp.Column)
        and not any(
            isinstance(a.value, exp.Anonymous) and a.value.name.upper() == "DESCRIPTOR"
            for a in args
        )
    )


class HeadwaterParser(BaseParser):
    """sqlglot's default parser, plus windowing TVFs, EMIT and WATERMARK FOR."""

    FUNC_TOKENS = {*BaseParser.FUNC_TOKENS, TokenType.SESSION}

    #: Flink's REGEXP_EXTRACT(s, pattern, group), whose third argument is the capture
    #: group (sqlglot's default reads it as a position).
    FUNCTIONS = {
        **BaseParser.FUNCTIONS,
        "REGEXP_EXTRACT": _regexp_extract,
        "LOG": _logarithm,
        "DATE_FORMAT": _date_format,
        "SPLIT_INDEX": _split_index,
        "JSON_VALUE": _json_value,
        "DATE_DIFF": date_diff,
        "DATEDIFF": date_diff,
        "TIMESTAMPDIFF": timestamp_diff,
        "TIMESTAMPADD": timestamp_add,
        "EPOCH": field_of("EPOCH"),
        "DATE_PART": date_part("DATE_PART"),
        "DATEPART": date_part("DATEPART"),
        "DAYOFWEEK": field_of("DOW"),
        "WEEKDAY": field_of("DOW"),
        "ISODOW": field_of("ISODOW"),
        "DAYOFWEEKISO": field_of("ISODOW"),
    }

    FUNCTION_PARSERS = {
        **BaseParser.FUNCTION_PARSERS,
        "TUMBLE": lambda self: self._parse_window_tvf("TUMBLE"),
        "HOP": lambda self: self._parse_window_tvf("HOP"),
        "SESSION": lambda self: self._parse_window_tvf("SESSION"),
        "CUMULATE": lambda self: self._refuse_bare_cumulate(),
        "FLOOR": lambda self: _floor_ceil_time(self._parse_ceil_floor(exp.Floor), self._prev),
        "CEIL": lambda self: _floor_ceil_time(self._parse_ceil_floor(exp.Ceil), self._prev),
        "TABLE": lambda self: self._parse_flink_window_tvf(),
    }

    CONSTRAINT_PARSERS = {
        **BaseParser.CONSTRAINT_PARSERS,
        "WATERMARK": lambda self: self._parse_watermark(),
    }

    SCHEMA_UNNAMED_CONSTRAINTS = {*BaseParser.SCHEMA_UNNAMED_CONSTRAINTS, "WATERMARK"}

    def _parse_window_tvf(self, kind: str, first: Token | None = None) -> WindowTVF:
        """After ``KIND (``; the closing parenthesis is left to sqlglot's function parsing.

        ``first`` is the token of Flink's enclosing TABLE(, if any.
        """
        call = self._tokens[self._index - 2]
        args = self._parse_csv(self._parse_tvf_arg)
        if not self._match(TokenType.R_PAREN, advance=False):
            self.raise_error("Expecting )")
        if first is None and _is_group_window(args):
            window = GroupWindow(kind=kind, expressions=[a.value for a in args])
            return t.cast(WindowTVF, self.expression(window, token=call))
        tvf = _window_tvf(kind, first is not None, call, args)
        return self.expression(tvf, token=first or call)

    def _refuse_bare_cumulate(self) -> WindowTVF:
        """``CUMULATE(...)`` outside TABLE(...): Flink has no other spelling of it."""
        raise SqlError(
            "CUMULATE is a windowing table function: it is called inside TABLE(...)",
            *token_position(self._tokens[self._index - 2]),
            "Write FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE, "
            "INTERVAL '10' MINUTE))",
        )

    def _parse_flink_window_tvf(self) -> WindowTVF:
        """After ``TABLE (``: Flink's TABLE(TUMBLE(...)), the only use of TABLE(...) here."""
        first = self._tokens[self._index - 2]
        kind = self._curr.text.upper()
        if kind not in WINDOW_KINDS or self._next.token_type != TokenType.L_PAREN:
            raise SqlError(
                "TABLE(...) must wrap a windowing table function",
                *token_position(self._curr or first),
                "Write TABLE(TUMBLE(...)), TABLE(HOP(...)), TABLE(SESSION(...)) "
                "or TABLE(CUMULATE(...))",
            )
        self._advance(2)
        tvf = self._parse_window_tvf(kind, first)
        self._advance()  # the window function's ")", checked above
        if not self._match(TokenType.R_PAREN, advance=False):
            self.raise_error("Expecting )")
        return tvf

    def _parse_tvf_arg(self) -> _TvfArg | None:
        """``[name =>] value [PARTITION BY keys]``, keeping TABLE arguments apart from
        plain expressions so that a wrong kind of argument gets a precise error."""
        name = None
        if self._next.token_type == TokenType.FARROW:
            name = self._curr
            self._advance(2)
        at = self._curr
        if name is None and self._match(TokenType.R_PAREN, advance=False):
            return None
        if self._match(TokenType.TABLE):
            value = self._parse_tvf_table()
        else:
            value = self._parse_assignment()
        if value is None:
            self.raise_error("Expecting an argument")
        elif isinstance(value, exp.Interval):
            value.update_positions(at)
        return _TvfArg(name, at, t.cast(exp.Expr, value), self._parse_tvf_keys())

    def _parse_tvf_table(self) -> exp.Expr | None:
        """After TABLE: ``name``, ``(name)`` or ``(SELECT ...)``."""
        if self._curr.token_type == TokenType.L_PAREN and self._next.token_type in (
            TokenType.SELECT,
            TokenType.WITH,
        ):
            return self._parse_select(table=True, parse_subquery_alias=False)
        return self._parse_wrapped(self._parse_table_parts, optional=True)

    def _parse_tvf_keys(self) -> list[exp.Expr] | None:
        """``PARTITION BY k`` or ``PARTITION BY (k1, k2)`` after a table argument."""
        if not self._match(TokenType.PARTITION_BY):
            return None
        if self._match(TokenType.L_PAREN, advance=False):
            return self._parse_wrapped_csv(self._parse_column)
        column = self._parse_column()
        return [column] if column else []

    def _parse_table(self, *args: t.Any, **kwargs: t.Any) -> exp.Expr | None:
        """A TVF in FROM comes back wrapped in a Table (as sqlglot does for TABLE(<udtf>));
        unwrap it so that FROM and JOIN hold the WindowTVF, with the alias."""
        this = super()._parse_table(*args, **kwargs)
        if isinstance(this, exp.Table) and isinstance(this.this, WindowTVF):
            tvf = this.this
            tvf.set("alias", this.args.get("alias"))
            return tvf
        return this

    def _parse_watermark(self) -> exp.WatermarkColumnConstraint | None:
        """``WATERMARK FOR ts AS <bound>`` in CREATE TABLE (Flink's syntax); without FOR,
        WATERMARK is a column's name."""
        if not self._match(TokenType.FOR):
            return None
        column = self._parse_column()
        if not self._match(TokenType.ALIAS):
            self.raise_error("Expecting AS")
        bound = self._parse_assignment()
        return self.expression(exp.WatermarkColumnConstraint(this=column, expression=bound))

    def _parse_as_command(self, start: Token) -> exp.Command:
        """sqlglot keeps statements it cannot parse as opaque commands; headwater cannot
        run those, so the unexpected token is an error."""
        found = self._curr.text if self._curr else "end of statement"
        self.raise_error(f"Unexpected {found} in {start.text.upper()}")
        return super()._parse_as_command(start)

    def _at_emit(self) -> bool:
        return self._curr.token_type == TokenType.VAR and self._curr.text.upper() == "EMIT"

    def _parse_group(self, skip_group_by_token: bool = False) -> exp.Group | None:
        """``GROUP BY ALL EMIT ...``: after ALL, sqlglot reads on and would take EMIT
        for a column to group by."""
        index = self._index
        if skip_group_by_token or self._match(TokenType.GROUP_BY):
            if self._match(TokenType.ALL) and self._curr is not None and self._at_emit():
                return self.expression(exp.Group(all=True))
        self._retreat(index)
        return super()._parse_group(skip_group_by_token)

    def _parse_table_alias(
        self, alias_tokens: t.Collection[TokenType] | None = None
    ) -> exp.TableAlias | None:
        """EMIT starts the clause; it is never an implicit alias (``FROM Bid EMIT STREAM``)."""
        return None if self._at_emit() else super()._parse_table_alias(alias_tokens)

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        return this if self._at_emit() else super()._parse_alias(this, explicit)

    def _parse_statement(self) -> exp.Expr | None:
        """EMIT ends a statement: it applies to the whole query, after ORDER BY and LIMIT."""
        statement = super()._parse_statement()
        if self._at_emit():
            emit_token = self._curr
            query = statement.expression if isinstance(statement, exp.Insert) else statement
            if not isinstance(query, exp.Query):
                raise SqlError(
                    "EMIT ends a query", *token_position(emit_token), "Write SELECT ... EMIT ..."
                )
            query.set("emit", self._parse_emit())
        return statement

    def _parse_emit(self) -> Emit:
        emit_token = self._curr
        self._advance()
        stream = self._match_text_seq("STREAM")
        triggers: dict[str, t.Any] = {}
        if not stream or self._curr.text.upper() == "AFTER":
            self._parse_emit_trigger(triggers)
            while self._match(TokenType.AND):
                self._parse_emit_trigger(triggers)
        if self._curr:
            raise self._emit_error(f"{self._curr.text} does not belong in an EMIT clause")
        watermark, delay = bool(triggers.get("watermark")), triggers.get("delay")
        return self.expression(Emit(stream=stream, watermark=watermark, delay=delay), emit_token)

    def _parse_emit_trigger(self, triggers: dict[str, t.Any]) -> None:
        """``AFTER WATERMARK`` or ``AFTER DELAY <interval>``, each at most once."""
        if not self._match_text_seq("AFTER"):
            raise self._emit_error("EMIT needs STREAM, AFTER WATERMARK or AFTER DELAY")
        trigger = self._curr
        if self._match_text_seq("WATERMARK"):
            key, value = "watermark", True
        elif self._match_text_seq("DELAY"):
            key, value = "delay", self._parse_emit_delay()
        else:
            raise self._emit_error("AFTER in EMIT is followed by WATERMARK or DELAY")
        if key in triggers:
            raise SqlError(f"AFTER {trigger.text} is given twice", *token_position(trigger))
        triggers[key] = value

    def _parse_emit_delay(self) -> int:
        at = self._curr
        interval = self._parse_interval()
        if interval is None:
            raise self._emit_error("AFTER DELAY needs an INTERVAL")
        interval.update_positions(at)
        delay = interval_ms(interval)
        if delay <= 0:
            raise SqlError(
                f"the delay must be positive, not {interval.sql()}", *token_position(at), _EMIT_HINT
            )
        return delay

    def _emit_error(self, message: str) -> SqlError:
        """At the current token, or at the last one when the query ends too early."""
        return SqlError(message, *token_position(self._curr or self._prev), _EMIT_HINT)


def _data_sql(gen: generator.Generator, tvf: WindowTVF) -> str:
    data = tvf.this
    text = f"TABLE({gen.sql(data.this if isinstance(data, exp.Subquery) else data)})"
    keys = tvf.args.get("keys")
    if tvf.args.get("flink") and keys:
        text += f" PARTITION BY ({', '.join(gen.sql(k) for k in keys)})"
    return text


def _param_sql(gen: generator.Generator, tvf: WindowTVF, target: str) -> str:
    value = tvf.args.get(target)
    if target == "this":
        return _data_sql(gen, tvf)
    if target == "timecol":
        return f"DESCRIPTOR({gen.sql(value)})"
    if target == "keys":
        return f"DESCRIPTOR({', '.join(gen.sql(k) for k in value)})"
    return interval_sql(value)


def _window_tvf_sql(gen: generator.Generator, tvf: WindowTVF) -> str:
    """Named arguments in the spelling it was written in, so that it parses back the same."""
    kind, flink = tvf.args["kind"], bool(tvf.args.get("flink"))
    args = ", ".join(
        f"{_shown(param, flink)} => {_param_sql(gen, tvf, _PARAM_ARG[param])}"
        for param in _SIGNATURES[(flink, kind)]
        if tvf.args.get(_PARAM_ARG[param]) not in (None, [])
    )
    call = f"TABLE({kind}({args}))" if flink else f"{kind.capitalize()}({args})"
    alias = gen.sql(tvf, "alias")
    return f"{call} AS {alias}" if alias else call


def _emit_sql(gen: generator.Generator, emit: Emit) -> str:
    triggers = []
    if emit.args.get("delay"):
        triggers.append(f"AFTER DELAY {interval_sql(emit.args['delay'])}")
    if emit.args.get("watermark"):
        triggers.append("AFTER WATERMARK")
    words = (["STREAM"] if emit.args.get("stream") else []) + [" AND ".join(triggers)]
    return f"{gen.seg('EMIT')} {' '.join(w for w in words if w)}"


def _date_diff_sql(gen: generator.Generator, node: exp.DateDiff) -> str:
    """A DATE_DIFF with a unit as DuckDB's ``DATE_DIFF('unit', start, end)``, which
    the parser reads back (sqlglot's default is ``DATEDIFF(end, start, unit)``)."""
    unit = node.args.get("unit")
    if unit is None:
        return gen.function_fallback_sql(node)
    start, end = gen.sql(node, "expression"), gen.sql(node, "this")
    return f"DATE_DIFF('{unit.name}', {start}, {end})"


class HeadwaterGenerator(generator.Generator):
    """sqlglot's default generator; TVFs and EMIT in the spelling they were parsed
    from; what :mod:`~headwater.sql.parse.time_units` builds as the parser reads it."""

    TRANSFORMS = {
        **generator.Generator.TRANSFORMS,
        WindowTVF: _window_tvf_sql,
        Emit: _emit_sql,
        exp.DateDiff: _date_diff_sql,
        exp.IntDiv: lambda gen, node: gen.binary(node, "DIV"),
    }

    def after_limit_modifiers(self, expression: exp.Expr) -> list[str]:
        return [*super().after_limit_modifiers(expression), self.sql(expression, "emit")]


class HeadwaterTokenizer(Tokenizer):
    """sqlglot's tokenizer; an identifier is quoted "like this" or, as in Flink, `like this`."""

    IDENTIFIERS = ['"', "`"]


class Headwater(Dialect):
    """The dialect: ``sqlglot.parse(text, read=Headwater)``, ``node.sql(dialect=Headwater)``."""

    Tokenizer = HeadwaterTokenizer
    Parser = HeadwaterParser
    Generator = HeadwaterGenerator


#: sqlglot's message for a node left without a required part, e.g. ``WHERE price >``.
_MISSING_ARG = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*\.(?P<node>\w+)'>")
#: sqlglot's "Expected table name but got <Token ... text: SENTINEL, ...>".
_EXPECTED_GOT = re.compile(r"Expected (?P<what>.+?) but got <Token .*?text: (?P<text>[^,]*),")
#: Operators and clauses as the user spells them, by sqlglot's node name.
_SPELLED = {
    "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=", "EQ": "=", "NEQ": "<>", "ADD": "+",
    "SUB": "-", "MUL": "*", "DIV": "/", "MOD": "%", "DPIPE": "||", "NULLSAFEEQ": "<=>",
}  # fmt: skip


def _incomplete(node: str, found: str) -> tuple[str, str]:
    """``price >`` or ``price = AND``: what is missing, and what follows instead."""
    spelled = _SPELLED.get(node, node)
    after = f", not by {found!r}" if found and found.upper() != spelled else ""
    example = f"price {spelled} 3" if node in _SPELLED else f"{spelled} price > 3"
    return (
        f"{spelled} must be followed by an expression{after}",
        f"Write one after {spelled} (e.g. {example}), or remove {spelled}",
    )


def _plain(description: str, found: str) -> tuple[str, str]:
    """sqlglot's description of a syntax error as (reason, hint) in the user's words."""
    incomplete = _MISSING_ARG.match(description)
    if incomplete:
        return _incomplete(incomplete["node"].upper(), found)
    if description.startswith("Invalid expression / Unexpected token"):
        return (
            f"unexpected {found!r}" if found else "unexpected end of the query",
            "Check for a missing comma or operator before it, or one parenthesis or word too many",
        )
    expecting = re.fullmatch(r"Expecting (?P<what>.+)", description)
    if expecting:
        what = expecting["what"]
        what = f"{what!r}" if len(what) == 1 else what
        return f"expected {what}" + (f" before {found!r}" if found else ""), ""
    expected = _EXPECTED_GOT.match(description)
    if expected:
        got = expected["text"]
        where = "at the end of the query" if got == "SENTINEL" else f"before {got!r}"
        return f"expected {expected['what']} after {found!r} {where}", ""
    return description, ""


def _parse_error(error: ParseError) -> SqlError:
    """sqlglot's first error, at the column where its token starts, in plain words."""
    detail = error.errors[0] if error.errors else {}
    line, col = detail.get("line"), detail.get("col")
    highlight = detail.get("highlight") or ""
    if col is not None and highlight and "\n" not in highlight:
        col = max(1, col - len(highlight) + 1)
    message, hint = _plain(detail.get("description") or str(error), highlight.strip())
    return SqlError(message, line, col, hint)


def _token_error(error: TokenError, text: str) -> SqlError:
    """An unclosed quote, at the quote: the tokenizer's cause says where (line:offset)."""
    unclosed = re.fullmatch(r"Missing (.+) from \d+:(\d+)", str(error.__cause__ or ""))
    if not unclosed:
        return SqlError(str(error).split("\n")[0])
    offset = int(unclosed[2])
    line, col = text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)
    return SqlError(f"the {unclosed[1]} opened here is never closed", line, col)


def _check_statement(statement: exp.Expr) -> None:
    """Only what headwater runs; a windowing TVF only where a table goes."""
    query = statement.expression if isinstance(statement, exp.Insert) else statement
    create_table = isinstance(statement, exp.Create) and statement.kind in ("TABLE", "FUNCTION")
    create_view = (
        isinstance(statement, exp.Create)
        and statement.kind == "VIEW"
        and isinstance(statement.expression, exp.Query)
    )
    if not (create_table or create_view or isinstance(query, exp.Query)):
        kind = statement.this if isinstance(statement, exp.Command) else statement.key.upper()
        raise SqlError(
            f"headwater does not run {kind} statements",
            *position(statement),
            _SCRIPT_HINT,
        )
    for tvf in statement.find_all(WindowTVF):
        if not isinstance(tvf.parent, (exp.From, exp.Join)):
            raise SqlError(
                f"{tvf.args['kind']} is a table function: it goes in FROM or JOIN",
                *position(tvf),
            )


def _check_shifts(tokens: list[Token]) -> None:
    """``price > > 3`` is no operator, though sqlglot reads it as ``price >> 3`` (a
    bit shift): refuse two ``>`` (or ``<``) apart rather than shift silently."""
    for first, second in zip(tokens, tokens[1:], strict=False):
        spaced = second.start > first.end + 1
        if spaced and first.token_type == second.token_type in (TokenType.GT, TokenType.LT):
            op = first.text
            raise SqlError(
                f"'{op} {op}' is not an operator",
                *token_position(second),
                f"Remove one {op} (or write {op}{op} for a bit shift)",
            )


def parse(text: str) -> list[exp.Expression]:
    """All statements of a script (SELECT/UNION queries, CREATE TABLE, INSERT INTO ... SELECT).
    Parse errors raise SqlError with line/col of the offending token."""
    try:
        dialect = Headwater()
        tokens = dialect.tokenize(text)
        _check_shifts(tokens)
        statements = [s for s in dialect.parser().parse(tokens, text) if s is not None]
    except ParseError as error:
        raise _parse_error(error) from None
    except TokenError as error:
        raise _token_error(error, text) from None
    for statement in statements:
        to_window_tvfs(statement, WindowTVF)
        _check_statement(statement)
    return t.cast(list[exp.Expression], statements)


def parse_query(text: str) -> exp.Query:
    """Exactly one query statement (SqlError otherwise)."""
    statements = parse(text)
    if len(statements) == 1 and isinstance(statements[0], exp.Query):
        return statements[0]
    extra = statements[1] if len(statements) > 1 else (statements[0] if statements else None)
    raise SqlError(
        "expected exactly one query",
        *(position(extra) if extra is not None else (None, None)),
        "Pass a single SELECT (or UNION) query",
    )
