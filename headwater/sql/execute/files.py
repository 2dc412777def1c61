"""Source files as typed tables, and the lines that are not records as dead letters.

A CSV or JSON-lines file is read whole and fast (Arrow's CSV reader, pandas'
JSON reader); a line that is not a record of its table (not CSV or JSON, a
wrong number of fields, a value not of its column's type) is not a crash from
inside the reader but a row of :class:`FileRead.rejects`: the raw line, the
file, the line number and what is wrong (docs/semantics.md, "Bad input"). A
query that reads the table returns them with its dead letters (reason
``malformed``). Only when the file cannot be read at all (no header, not
text) is it one error naming the file.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from headwater.model.schema import RAW_RECORD_COLUMNS, DropReason
from headwater.sql.errors import SqlError


@dataclass
class FileRead:
    """A file's records (typed) and the lines that are none (:data:`RAW_RECORD_COLUMNS`
    and ``reason``)."""

    frame: pd.DataFrame
    rejects: pd.DataFrame


def no_rejects() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in ("reason", *RAW_RECORD_COLUMNS)})


def rejects(path: str, lines, raws, errors) -> pd.DataFrame:
    """Dead-letter rows of malformed lines (``lines``: numbers, None where unknown)."""
    n = len(raws)
    return pd.DataFrame(
        {
            "reason": np.full(n, DropReason.MALFORMED.value, dtype=object),
            "source_file": np.full(n, str(path), dtype=object),
            "source_line": pd.array(list(lines), dtype="Int64"),
            "raw_record": np.asarray(raws, dtype=object),
            "error": np.asarray(errors, dtype=object),
        }
    )


# ------------------------------------------------------------------ typing values


def _integers(s: pd.Series) -> pd.Series:
    number = pd.to_numeric(s, errors="coerce")
    whole = number.notna() & (number == np.round(number))
    return number.where(whole).astype("Float64").astype("Int64")


def _text(value: Any) -> str:
    """A JSON scalar as the text Flink's and Spark's JSON formats read into a
    STRING column: ``true``, ``7``, ``1.5``."""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    return str(value)


def _texts(s: pd.Series) -> pd.Series:
    if pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
        return s.astype(object)
    return s.map(_text, na_action="ignore").astype(object)


def _booleans(s: pd.Series) -> pd.Series:
    text = s.map(lambda v: str(v).strip().lower() if isinstance(v, str | bool) else None)
    return text.map({"true": True, "false": False}).astype("boolean")


def _timestamps(s: pd.Series) -> pd.Series:
    stamps = pd.to_datetime(s, utc=True, errors="coerce", format="mixed")
    return stamps.dt.tz_localize(None).astype("datetime64[ns]")


def _doubles(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce").astype(np.float64)


#: The SQL types a source reads, by the type's first word (sqlglot writes Flink's
#: STRING as TEXT and TIMESTAMP_LTZ as TIMESTAMPLTZ) -> a vectorized reader that
#: gives NULL where a value is not of the type.
TYPED: dict[str, Callable[[pd.Series], pd.Series]] = {
    "TIMESTAMP": _timestamps,
    "TIMESTAMPLTZ": _timestamps,
    "DECIMAL": _doubles,
    "NUMERIC": _doubles,
    "DOUBLE": _doubles,
    "FLOAT": _doubles,
    "REAL": _doubles,
    "BIGINT": _integers,
    "INTEGER": _integers,
    "INT": _integers,
    "SMALLINT": _integers,
    "TINYINT": _integers,
    "BOOLEAN": _booleans,
    "VARCHAR": _texts,
    "CHAR": _texts,
    "STRING": _texts,
    "TEXT": _texts,
}


def reader_of(sql_type: str) -> Callable[[pd.Series], pd.Series] | None:
    """The reader of ``sql_type`` (None: no source reads it)."""
    return TYPED.get(re.match(r"[A-Z_]*", sql_type.strip().upper()).group())


def check_types(types: Mapping[str, str], where: str, line: int | None = None) -> None:
    """SqlError naming the first declared column of a type no source reads (an
    ARRAY, a MAP, a DATE...): its values would otherwise reach the query unread."""
    for column, sql_type in types.items():
        if not isinstance(sql_type, str) or reader_of(sql_type) is None:
            raise SqlError(
                f"{where}: column {column!r} is declared {sql_type!r}, a type no source reads",
                line,
                None,
                f"Declare one of {', '.join(TYPED)}; a nested JSON value is read into "
                "VARCHAR as its JSON text (JSON_VALUE reads into it)",
            )


#: What :func:`pandas.api.types.infer_dtype` says of an object column that holds no
#: JSON object or list (checked in C, so a column of text costs no Python loop).
_SCALAR_KINDS = frozenset(
    ["empty", "string", "boolean", "integer", "floating", "mixed-integer-float", "decimal"]
)


def nested_as_json(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each JSON object or list value as its compact JSON text, as
    Flink's and Spark's JSON formats read a nested value into a STRING column: a
    column then has one SQL type however its values' shapes differ, and groups,
    sorts and compares as text (``json_extract`` reads into it)."""
    out = frame
    for column in frame.select_dtypes(include=object).columns:
        values = frame[column]
        if pd.api.types.infer_dtype(values, skipna=True) in _SCALAR_KINDS:
            continue
        nested = values.map(type).isin([dict, list]).to_numpy()
        if nested.any():
            if out is frame:
                out = frame.copy()
            text = [json.dumps(v, separators=(",", ":"), default=str) for v in values[nested]]
            out[column] = values.where(~nested, pd.Series(text, index=values.index[nested]))
    return out


def typed(frame: pd.DataFrame, types: Mapping[str, str]) -> tuple[pd.DataFrame, np.ndarray]:
    """``frame`` with its declared columns typed, and per row the first column
    whose value is not of its type (``''``: none); nested values are JSON text
    first (:func:`nested_as_json`)."""
    frame = nested_as_json(frame)
    out = frame.copy()
    bad = np.full(len(frame), "", dtype=object)
    for column, sql_type in types.items():
        reader = reader_of(sql_type)
        if reader is None:
            continue
        # a declared column no record has is NULL in each, as Flink reads a missing field
        given = frame[column] if column in frame.columns else pd.Series(None, frame.index, object)
        values = reader(given)
        wrong = (given.notna() & values.isna()).to_numpy() & (bad == "")
        bad[wrong] = [f"column {column!r}: {v!r} is not {sql_type}" for v in given[wrong]]
        out[column] = values
    return out, bad


def first_type(column: pd.Series) -> str | None:
    """The SQL type of an undeclared JSON column: that of its first non-null value
    (a text among numbers is then a bad value; a number among texts, its text, as
    Flink and Spark read a JSON scalar into a STRING column)."""
    values = column.dropna()
    if not len(values):
        return None
    first = values.iloc[0]
    if isinstance(first, str | dict | list):  # a number or boolean among them: its JSON text
        return "VARCHAR"
    if isinstance(first, bool | np.bool_):
        return "BOOLEAN"
    if not isinstance(first, int | float | np.integer | np.floating):
        return None
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    return "BIGINT" if (numbers == np.round(numbers)).all() else "DOUBLE"


def with_guesses(frame: pd.DataFrame, types: Mapping[str, str]) -> dict[str, str]:
    """``types`` and the guessed type of each undeclared column of mixed values."""
    out = dict(types)
    for column in frame.columns:
        if column not in out and frame[column].dtype == object:
            guess = first_type(frame[column])
            if guess is not None:
                out[column] = guess
    return out


# ------------------------------------------------------------------ CSV


def read_csv(path: str, types: Mapping[str, str]) -> FileRead:
    """A CSV file with a header: its records typed by ``types``, and its bad lines."""
    with open(path, "rb") as fh:
        data = fh.read()
    bad_rows: list[tuple[int | None, str, str]] = []

    def invalid(row) -> str:
        what = f"{row.actual_columns} fields, the header has {row.expected_columns}"
        bad_rows.append((row.number, row.text, what))
        return "skip"

    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    names = next(csv.reader([first]), [])
    if not any(n.strip() for n in names):
        raise SqlError(f"{path}, line 1: a CSV source needs a header line of column names")
    try:
        table = pa_csv.read_csv(
            io.BytesIO(data),
            read_options=pa_csv.ReadOptions(use_threads=False),
            parse_options=pa_csv.ParseOptions(invalid_row_handler=invalid, newlines_in_values=True),
            convert_options=pa_csv.ConvertOptions(
                column_types={c: pa.string() for c in names}, strings_can_be_null=True
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise SqlError(f"{path}: not a CSV file with a header ({exc})") from None
    text = table.to_pandas()
    frame, wrong = typed(text, types)
    lines, raws = _csv_lines(data, len(frame), [n for n, _, _ in bad_rows], text)
    keep = wrong == ""
    found = rejects(
        path,
        [*(n for n, _, _ in bad_rows), *np.asarray(lines, dtype=object)[~keep]],
        [*(t for _, t, _ in bad_rows), *np.asarray(raws, dtype=object)[~keep]],
        [*(w for _, _, w in bad_rows), *wrong[~keep]],
    )
    return FileRead(frame[keep].reset_index(drop=True), found)


def _csv_lines(data: bytes, rows: int, skipped: list, frame: pd.DataFrame):
    """Each record's line number and text: the file's non-empty lines after the
    header, less the skipped ones, when each record is one line; else unknown
    numbers and the record's fields joined with commas."""
    text = data.decode("utf-8", errors="replace").splitlines()
    numbered = [(i, line) for i, line in enumerate(text[1:], 2) if line.strip()]
    gone = set(skipped)
    numbered = [(i, line) for i, line in numbered if i not in gone]
    if len(numbered) == rows:
        return [i for i, _ in numbered], [line for _, line in numbered]
    joined = frame.fillna("").agg(",".join, axis=1) if rows else pd.Series([], dtype=object)
    return [None] * rows, list(joined)


# ------------------------------------------------------------------ JSON lines


def read_json_lines(path: str, types: Mapping[str, str]) -> FileRead:
    """A JSON-lines file (one object a line): its records typed by ``types`` (an
    undeclared column by its first value, :func:`first_type`), and its bad lines."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read().splitlines()
    numbered = [(i, line) for i, line in enumerate(text, 1) if line.strip()]
    try:
        frame = pd.read_json(
            io.StringIO("\n".join(line for _, line in numbered)),
            lines=True,
            dtype=False,
            convert_dates=False,
        )
        records_ok = len(frame) == len(numbered)
    except ValueError:
        records_ok = False
    bad: list[tuple[int, str, str]] = []
    if not records_ok:  # find the lines that are not objects (only when some are not)
        records = []
        good = []
        for i, line in numbered:
            obj, error = _object(line)
            if error:
                bad.append((i, line, error))
            else:
                records.append(obj)
                good.append((i, line))
        numbered = good
        frame = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=[*types])
    frame, wrong = typed(frame, with_guesses(frame, types))
    keep = wrong == ""
    dropped = [numbered[j] for j in np.flatnonzero(~keep)]
    found = rejects(
        path,
        [*(i for i, _, _ in bad), *(i for i, _ in dropped)],
        [*(line for _, line, _ in bad), *(line for _, line in dropped)],
        [*(e for _, _, e in bad), *wrong[~keep]],
    )
    return FileRead(frame[keep].reset_index(drop=True), found)


def _object(line: str) -> tuple[dict | None, str]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    return obj, ""
