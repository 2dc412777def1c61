"""The grammar and data of the streaming differential fuzzer
(tests/sql/test_stream_vs_bounded.py).

Three small streams, NEXMark-like: ``Bid`` (bids on auctions, by bidders),
``Auction`` (sold by persons) and ``Person``. Each row has a unique event time in
its stream (so ``ORDER BY`` the event time is a total order and a dead letter
names one row), a third of them on whole minutes (window boundaries). Rows arrive
out of order over a few processing-time steps; some so late that the watermark
has passed their window (dead letters). Every random choice comes from one
``random.Random`` per data set or query, so a seed reproduces both.

A query is built from small parts: a source (a stream, or a windowing TVF over
it, in either spelling), predicates, and one of the query shapes of
:data:`SHAPES` (projection, aggregate, DISTINCT, window functions, joins, semi-
and anti-joins, set operations, subqueries).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from headwater.sql import read_replay

BASE = pd.Timestamp("2024-01-01 10:00:00")
#: Event times span this many seconds.
SPAN = 1200


# ------------------------------------------------------------------ streams


@dataclass(frozen=True)
class Stream:
    """A stream's columns as the grammar uses them: its event time, its unique row
    id, integer columns to group and join by, numbers to aggregate, labels (text)."""

    name: str
    time: str
    id: str
    keys: tuple[str, ...]
    numbers: tuple[str, ...]
    labels: tuple[str, ...]

    @property
    def groupable(self) -> tuple[str, ...]:
        return self.keys + self.labels


BID = Stream("Bid", "bidtime", "bid_id", ("auction", "bidder"), ("price",), ("channel",))
AUCTION = Stream("Auction", "ts", "id", ("seller", "category"), ("reserve",), ())
PERSON = Stream("Person", "pts", "pid", (), ("age",), ("city",))
STREAMS = (BID, AUCTION, PERSON)


@dataclass(frozen=True)
class ForeignKey:
    """``left.column = right.column``: how two streams join."""

    left: Stream
    left_column: str
    right: Stream
    right_column: str


FOREIGN_KEYS = (
    ForeignKey(BID, "auction", AUCTION, "id"),
    ForeignKey(AUCTION, "seller", PERSON, "pid"),
    ForeignKey(BID, "bidder", PERSON, "pid"),
    ForeignKey(BID, "bidder", AUCTION, "seller"),
)


# ------------------------------------------------------------------ data


def _times(rng: random.Random, n: int) -> list[int]:
    """``n`` distinct event times (seconds after BASE), a third on whole minutes."""
    minutes = rng.sample(range(0, SPAN, 60), k=min(n // 3, SPAN // 60))
    others = [s for s in rng.sample(range(SPAN), k=3 * n) if s % 60][: n - len(minutes)]
    times = minutes + others
    rng.shuffle(times)
    return times


def _maybe(rng: random.Random, value, null_rate: float = 0.08):
    return None if rng.random() < null_rate else value


def stream_rows(rng: random.Random, stream: Stream, n: int) -> list[dict]:
    """``n`` random rows of ``stream`` (the event time in seconds after BASE)."""
    rows = []
    for i, t in enumerate(_times(rng, n)):
        if stream is BID:
            row = {
                "auction": rng.randint(1, 7),
                "bidder": rng.randint(1, 5),
                "price": _maybe(rng, rng.randint(1, 20)),
                "channel": _maybe(rng, rng.choice("abc")),
            }
        elif stream is AUCTION:
            row = {
                "seller": rng.randint(1, 5),
                "category": rng.choice([10, 20, 30]),
                "reserve": _maybe(rng, rng.randint(1, 20)),
            }
        else:
            row = {"age": _maybe(rng, rng.randint(18, 60)), "city": _maybe(rng, rng.choice("PQR"))}
        rows.append({stream.time: t, stream.id: i + 1, **row})
    if rows and rng.random() < 0.3:
        rows[-1][stream.time] = None  # a NULL event time: a dead letter
    return rows


@dataclass(frozen=True)
class Replay:
    """A data set: the replay files' tables, and the processing times (epoch ms)
    at which the fuzzer compares the table view with the bounded query."""

    tables: dict
    checkpoints: tuple[int, ...]


def _millis(seconds: float) -> int:
    return int((BASE + pd.Timedelta(seconds=seconds)).value // 1_000_000)


def _iso(seconds: float) -> str:
    return (BASE + pd.Timedelta(seconds=seconds)).isoformat()


def write_stream(path: Path, rows: list[dict], stream: Stream, steps: list[int], slack: int):
    """A replay file: each row arrives at the first step at or after its event time
    plus a random delay (some long: late rows); after each step the watermark is
    the largest event time arrived minus ``slack`` seconds."""
    rng = random.Random(f"{path.name}-{len(rows)}")
    by_step: dict[int, list[dict]] = {s: [] for s in steps}
    for row in rows:
        t = row[stream.time] if row[stream.time] is not None else rng.randrange(SPAN)
        delay = rng.choice([0, 5, 20, 60]) if rng.random() < 0.8 else rng.randint(120, 600)
        at = next((s for s in steps if s >= t + delay), steps[-1])
        by_step[at].append(row)
    lines, top = [], None
    for step in steps:
        for row in by_step[step]:
            t = row[stream.time]
            values = {**row, stream.time: None if t is None else _iso(t)}
            lines.append({"ptime": _iso(step), "row": values})
            top = t if top is None or (t is not None and t > top) else top
        if top is not None:
            lines.append({"ptime": _iso(step), "watermark": _iso(top - slack)})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def make_replay(seed: int, folder: Path) -> Replay:
    """The data set of ``seed``: the three streams over 3 to 5 steps."""
    rng = random.Random(seed)
    count = rng.randint(3, 5)
    steps = sorted(rng.sample(range(120, SPAN + 300, 60), k=count - 1)) + [SPAN + 600]
    slack = rng.choice([0, 30, 60])
    lateness = 1000 * rng.choice([0, 0, 30, 90])
    sizes = {BID: rng.randint(22, 34), AUCTION: rng.randint(6, 8), PERSON: rng.randint(4, 5)}
    tables = {}
    for stream in STREAMS:
        path = folder / f"{stream.name.lower()}-{seed}.jsonl"
        write_stream(path, stream_rows(rng, stream, sizes[stream]), stream, steps, slack)
        types = {stream.time: "TIMESTAMP", **{c: "BIGINT" for c in (*stream.keys, stream.id)}}
        types.update({c: "BIGINT" for c in stream.numbers})
        types.update({c: "VARCHAR" for c in stream.labels})
        tables[stream.name] = read_replay(path, stream.name, stream.time, types, lateness)
    picks = {count // 3, (2 * count) // 3, count}
    checkpoints = tuple(_millis(steps[i - 1]) for i in sorted(p for p in picks if p > 0))
    return Replay(tables, checkpoints)


# ------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Windowing:
    """A windowing TVF: ``kind`` TUMBLE, HOP, SESSION or CUMULATE (``slide`` its
    step); sizes in seconds; Flink's spelling (``TABLE(TUMBLE(TABLE t, ...))``,
    columns window_start/window_end) or the paper's (``Tumble(data => ...)``,
    columns wstart/wend; CUMULATE has Flink's only)."""

    kind: str
    size: int
    slide: int
    flink: bool
    session_key: str | None = None

    @property
    def start(self) -> str:
        return "window_start" if self.flink else "wstart"

    @property
    def end(self) -> str:
        return "window_end" if self.flink else "wend"

    def call(self, stream: Stream) -> str:
        def iv(seconds: int) -> str:
            return f"INTERVAL '{seconds}' SECOND"

        if self.flink:
            data = f"TABLE {stream.name}"
            if self.session_key:
                data += f" PARTITION BY {self.session_key}"
            args = {
                "TUMBLE": [iv(self.size)],
                "HOP": [iv(self.slide), iv(self.size)],
                "CUMULATE": [iv(self.slide), iv(self.size)],
            }
            rest = args.get(self.kind, [iv(self.size)])
            return f"TABLE({self.kind}({data}, DESCRIPTOR({stream.time}), {', '.join(rest)}))"
        args = [f"data => TABLE({stream.name})", f"timecol => DESCRIPTOR({stream.time})"]
        if self.kind == "SESSION":
            args.append(f"gap => {iv(self.size)}")
            if self.session_key:
                args.append(f"keys => DESCRIPTOR({self.session_key})")
        else:
            args.append(f"dur => {iv(self.size)}")
        if self.kind == "HOP":
            args.append(f"hopsize => {iv(self.slide)}")
        return f"{self.kind.capitalize()}({', '.join(args)})"


#: A windowing TVF call as :meth:`Windowing.call` writes it (either spelling);
#: group 1 or 2 is the stream's name.
WINDOWING_CALL = re.compile(
    r"TABLE\((?:TUMBLE|HOP|SESSION|CUMULATE)\(TABLE (\w+)(?: PARTITION BY \w+)?, DESCRIPTOR\(\w+\)"
    r"(?:, INTERVAL '\d+' SECOND)+\)\)"
    r"|(?:Tumble|Hop|Session)\(data => TABLE\((\w+)\)"
    r"(?:, \w+ => (?:INTERVAL '\d+' SECOND|DESCRIPTOR\(\w+\)))+\)"
)


def random_windowing(rng: random.Random, stream: Stream) -> Windowing:
    kind = rng.choice(["TUMBLE", "TUMBLE", "HOP", "SESSION", "CUMULATE"])
    flink = rng.random() < 0.5
    if kind == "TUMBLE":
        return Windowing(kind, rng.choice([60, 120, 300, 600]), 0, flink)
    if kind == "HOP":
        slide = rng.choice([60, 120, 300])
        return Windowing(kind, slide * rng.choice([1, 2, 3]), slide, flink)
    if kind == "CUMULATE":
        step = rng.choice([60, 120, 300])
        return Windowing(kind, step * rng.choice([2, 3, 4]), step, True)
    key = rng.choice([None, *stream.groupable])
    return Windowing(kind, rng.choice([60, 120, 240]), 0, flink, key)


@dataclass(frozen=True)
class Source:
    """A FROM item: a stream, maybe windowed, under an alias."""

    stream: Stream
    alias: str
    windowing: Windowing | None = None

    def sql(self) -> str:
        table = self.windowing.call(self.stream) if self.windowing else self.stream.name
        return f"{table} {self.alias}"

    def col(self, name: str) -> str:
        return f"{self.alias}.{name}"

    @property
    def window_columns(self) -> tuple[str, ...]:
        w = self.windowing
        return () if w is None else (self.col(w.start), self.col(w.end))


def random_source(rng: random.Random, stream: Stream, alias: str, windowed: float) -> Source:
    w = random_windowing(rng, stream) if rng.random() < windowed else None
    return Source(stream, alias, w)


# ------------------------------------------------------------------ expressions


def predicate(rng: random.Random, src: Source) -> str:
    """A filter on one source's columns (comparisons, IN, IS NULL, AND/OR)."""

    def atom() -> str:
        s = src.stream
        choice = rng.randrange(5)
        if choice == 0:
            return f"{src.col(rng.choice(s.numbers))} > {rng.randint(3, 15)}"
        if choice == 1 and s.keys:
            return f"{src.col(rng.choice(s.keys))} <> {rng.randint(1, 4)}"
        if choice == 2 and s.labels:
            return f"{src.col(rng.choice(s.labels))} IN ('a', 'P', 'b')"
        if choice == 3:
            return f"{src.col(rng.choice(s.numbers + s.labels))} IS NOT NULL"
        return f"{src.col(s.id)} % {rng.randint(2, 3)} = {rng.randint(0, 1)}"

    parts = [atom() for _ in range(rng.choice([1, 1, 2]))]
    return f" {rng.choice(['AND', 'OR'])} ".join(parts) if len(parts) > 1 else parts[0]


def where(rng: random.Random, src: Source, rate: float = 0.5) -> str:
    return f" WHERE {predicate(rng, src)}" if rng.random() < rate else ""


AGGREGATES = ("COUNT(*)", "COUNT({x})", "SUM({x})", "MIN({x})", "MAX({x})", "AVG({x})")


def aggregate(rng: random.Random, src: Source, alias: str) -> str:
    """An aggregate call over ``src``, maybe DISTINCT, maybe with FILTER (WHERE ...)."""
    s = src.stream
    if rng.random() < 0.2:
        call = f"COUNT(DISTINCT {src.col(rng.choice(s.groupable + s.numbers))})"
    else:
        call = rng.choice(AGGREGATES).format(x=src.col(rng.choice(s.numbers)))
    if rng.random() < 0.3:
        call += f" FILTER (WHERE {predicate(rng, src)})"
    return f"{call} AS {alias}"


# ------------------------------------------------------------------ shapes


def projection(rng: random.Random) -> str:
    src = random_source(rng, rng.choice(STREAMS), "s", 0.3)
    s = src.stream
    items = [src.col(s.id), src.col(s.time), *map(src.col, rng.sample(s.groupable, k=1))]
    items.append(f"{src.col(s.numbers[0])} * 2 + 1 AS y")
    items += list(src.window_columns)
    return f"SELECT {', '.join(items)} FROM {src.sql()}{where(rng, src, 0.8)}"


def with_session_key(rng: random.Random, src: Source, columns: list[str]) -> list[str]:
    """``columns``, mostly with the session key first when ``src`` has sessions per
    key (a grouping across keys is refused: the sessions are per key)."""
    w = src.windowing
    if w is not None and w.session_key and rng.random() < 0.8:
        return list(dict.fromkeys([src.col(w.session_key), *columns]))
    return columns


def group_keys(rng: random.Random, src: Source) -> list[str]:
    """What to GROUP BY: the window (when windowed) and maybe plain columns, or
    plain columns only, or nothing (one group)."""
    k = min(rng.choice([0, 1, 1, 2]), len(src.stream.groupable))
    plain = [src.col(c) for c in rng.sample(src.stream.groupable, k=k)]
    plain = with_session_key(rng, src, plain)
    if src.windowing is not None and rng.random() < 0.85:
        return [*src.window_columns, *plain]
    return plain


def grouped(rng: random.Random) -> str:
    """An aggregate per window and/or plain columns, or of all rows; keys maybe
    renamed (``window_start AS k0`` is still the window start)."""
    src = random_source(rng, rng.choice(STREAMS), "s", 0.5)
    keys = group_keys(rng, src)
    if rng.random() < 0.1:  # a key computed from the event time
        keys.append(f"CAST({src.col(src.stream.time)} AS DATE)")
    aggs = [aggregate(rng, src, f"a{i}") for i in range(rng.randint(1, 3))]
    named = [f"{k} AS k{i}" for i, k in enumerate(keys)] if rng.random() < 0.4 else keys
    if "CAST(" in "".join(named):
        named = [f"{k} AS k{i}" for i, k in enumerate(keys)]
    text = f"SELECT {', '.join([*named, *aggs])} FROM {src.sql()}{where(rng, src, 0.3)}"
    if keys:
        text += f" GROUP BY {', '.join(keys)}"
    if rng.random() < 0.25:
        text += f" HAVING COUNT(*) > {rng.randint(0, 2)}"
    return text


def distinct(rng: random.Random) -> str:
    src = random_source(rng, rng.choice(STREAMS), "s", 0.3)
    columns = with_session_key(rng, src, [src.col(rng.choice(src.stream.groupable))])
    if src.windowing is not None and rng.random() < 0.7:
        columns = [*src.window_columns, *columns]
    return f"SELECT DISTINCT {', '.join(columns)} FROM {src.sql()}{where(rng, src, 0.3)}"


def partition(rng: random.Random, src: Source) -> str:
    keys = [src.col(c) for c in rng.sample(src.stream.groupable, k=rng.choice([0, 1, 1]))]
    keys = with_session_key(rng, src, keys)
    if src.windowing is not None:
        keys = [*src.window_columns, *keys]
    return f"PARTITION BY {', '.join(keys)} " if keys else ""


def ranked(rng: random.Random) -> str:
    """Dedup / Top-N: ROW_NUMBER() per partition ordered by the event time."""
    src = random_source(rng, rng.choice(STREAMS), "s", 0.3)
    s = src.stream
    order = f"{src.col(s.time)} {rng.choice(['ASC', 'DESC'])}"
    number = f"ROW_NUMBER() OVER ({partition(rng, src)}ORDER BY {order}) AS rn"
    inner = f"SELECT {src.alias}.*, {number} FROM {src.sql()}{where(rng, src, 0.3)}"
    keep = rng.choice(["rn = 1", "rn = 1", "rn <= 2"])
    return f"SELECT {s.id}, {s.time}, rn FROM ({inner}) t WHERE {keep}"


def analytic(rng: random.Random) -> str:
    """LAG, or a running SUM/COUNT with a ROWS frame, per partition."""
    src = random_source(rng, rng.choice(STREAMS), "s", 0.2)
    s = src.stream
    over = f"{partition(rng, src)}ORDER BY {src.col(s.time)}"
    x = src.col(rng.choice(s.numbers))
    call = rng.choice(
        [
            f"LAG({x}) OVER ({over})",
            f"SUM({x}) OVER ({over} ROWS UNBOUNDED PRECEDING)",
            f"COUNT(*) OVER ({over} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
            f"MAX({x}) OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)",
            f"SUM({x}) OVER ({over} RANGE BETWEEN INTERVAL '90' SECOND PRECEDING AND CURRENT ROW)",
        ]
    )
    return f"SELECT {src.col(s.id)}, {call} AS v FROM {src.sql()}{where(rng, src, 0.3)}"


def _join_sources(rng: random.Random, windowed: float) -> tuple[Source, Source, str]:
    fk = rng.choice(FOREIGN_KEYS)
    left = random_source(rng, fk.left, "l", windowed)
    right = Source(fk.right, "r")
    on = f"{left.col(fk.left_column)} = {right.col(fk.right_column)}"
    w = left.windowing
    if w is not None and w.kind != "SESSION":  # a window join: both sides in equal windows
        right = Source(fk.right, "r", Windowing(w.kind, w.size, w.slide, w.flink))
        on += "".join(
            f" AND {a} = {b}"
            for a, b in zip(left.window_columns, right.window_columns, strict=True)
        )
    elif w is not None:
        left = Source(fk.left, "l")
    return left, right, on


def joined(rng: random.Random) -> str:
    """An inner or left outer join of two streams, projected or aggregated."""
    left, right, on = _join_sources(rng, 0.35)
    kind = rng.choice(["JOIN", "JOIN", "LEFT JOIN"])
    if rng.random() < 0.3:
        on += f" AND {predicate(rng, right)}"
    body = f"FROM {left.sql()} {kind} {right.sql()} ON {on}{where(rng, left, 0.3)}"
    if rng.random() < 0.5:
        items = [left.col(left.stream.id), right.col(right.stream.id)]
        items += [right.col(rng.choice(right.stream.numbers)), *left.window_columns]
        return f"SELECT {', '.join(items)} {body}"
    keys = [
        *left.window_columns,
        *rng.sample([left.col(left.stream.groupable[0])], k=rng.randint(0, 1)),
    ]
    aggs = [aggregate(rng, right, "a0"), aggregate(rng, left, "a1")]
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join([*keys, *aggs])} {body}{group}"


def semi(rng: random.Random) -> str:
    """A semi- or anti-join: [NOT] EXISTS or [NOT] IN of a subquery on another stream."""
    fk = rng.choice(FOREIGN_KEYS)
    outer, inner = Source(fk.left, "o"), Source(fk.right, "i")
    negate = "NOT " if rng.random() < 0.4 else ""
    filt = f" AND {predicate(rng, inner)}" if rng.random() < 0.5 else ""
    if rng.random() < 0.5:
        link = f"{inner.col(fk.right_column)} = {outer.col(fk.left_column)}"
        test = f"{negate}EXISTS (SELECT 1 FROM {inner.sql()} WHERE {link}{filt})"
    else:
        sub = f"SELECT {inner.col(fk.right_column)} FROM {inner.sql()}"
        sub += f" WHERE {inner.col(fk.right_column)} IS NOT NULL{filt}"
        test = f"{outer.col(fk.left_column)} {negate}IN ({sub})"
    items = [outer.col(outer.stream.id), outer.col(fk.left_column)]
    return f"SELECT {', '.join(items)} FROM {outer.sql()} WHERE {test}"


def set_operation(rng: random.Random) -> str:
    """UNION [ALL] of a key column of two streams, maybe counted per value."""
    fk = rng.choice(FOREIGN_KEYS)
    a, b = Source(fk.left, "a"), Source(fk.right, "b")
    op = rng.choice(["UNION ALL", "UNION"])
    first = f"SELECT {a.col(fk.left_column)} AS k FROM {a.sql()}{where(rng, a, 0.4)}"
    second = f"SELECT {b.col(fk.right_column)} AS k FROM {b.sql()}{where(rng, b, 0.4)}"
    union = f"{first} {op} {second}"
    if rng.random() < 0.5:
        return union
    return f"SELECT k, COUNT(*) AS n FROM ({union}) u GROUP BY k"


def nested(rng: random.Random) -> str:
    """An aggregate over a filtered, renamed subquery, or a scalar/correlated subquery."""
    src = random_source(rng, rng.choice(STREAMS), "s", 0.4)
    s = src.stream
    if rng.random() < 0.5:
        x, k = rng.choice(s.numbers), rng.choice(s.groupable)
        names = [f"{src.col(k)} AS g", f"{src.col(x)} AS x"]
        renamed = ["g"]
        if src.windowing is not None:
            names += [
                f"{src.col(src.windowing.start)} AS ws",
                f"{src.col(src.windowing.end)} AS we",
            ]
            renamed = ["ws", "we", *rng.sample(["g"], k=rng.randint(0, 1))]
            if src.windowing.session_key and rng.random() < 0.8:  # sessions per key: by key
                names[0], renamed = f"{src.col(src.windowing.session_key)} AS g", ["ws", "we", "g"]
        inner = f"SELECT {', '.join(names)} FROM {src.sql()}{where(rng, src, 0.5)}"
        agg = rng.choice(["SUM(x)", "COUNT(*)", "MAX(x)", "COUNT(DISTINCT x)"])
        keys = ", ".join(renamed)
        return f"SELECT {keys}, {agg} AS a FROM ({inner}) q GROUP BY {keys}"
    plain = Source(s, "s")
    x = rng.choice(s.numbers)
    inner = Source(s, "c")
    correlate = ""
    if rng.random() < 0.5:
        k = rng.choice(s.groupable)
        correlate = f" WHERE {inner.col(k)} = {plain.col(k)}"
    sub = f"SELECT {rng.choice(['MAX', 'MIN'])}({inner.col(x)}) FROM {inner.sql()}{correlate}"
    items = f"{plain.col(s.id)}, {plain.col(x)}"
    return f"SELECT {items} FROM {plain.sql()} WHERE {plain.col(x)} = ({sub})"


#: The query shapes, each a function of the query's random generator.
SHAPES = (
    projection,
    grouped,
    grouped,
    distinct,
    ranked,
    analytic,
    joined,
    semi,
    set_operation,
    nested,
)


def random_query(seed: int, number: int) -> str:
    """Query ``number`` of ``seed``'s batch."""
    rng = random.Random(f"query-{seed}-{number}")
    return rng.choice(SHAPES)(rng)
