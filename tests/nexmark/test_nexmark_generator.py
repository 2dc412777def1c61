"""The NEXMark generator: the reference's event mix, ids, times and distributions;
seeded reproducibility; out-of-order arrival; the files it writes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwater.cli import main as cli_main
from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.cli import main
from headwater.nexmark.config import BASE_TIME
from headwater.nexmark.output import steps, write
from headwater.sql.execute.replay import read_replay

N = 50_000
BASE = int(pd.Timestamp(BASE_TIME).value // 1_000_000)


@pytest.fixture(scope="module")
def events():
    return generate(NexmarkConfig(events=N, seed=7))


@pytest.fixture(scope="module")
def shuffled():
    return generate(NexmarkConfig(events=N, seed=7, out_of_order_ms=2000))


def _millis(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).cast(pa.int64()).to_numpy()


def test_same_seed_same_events_other_seed_other_events(events):
    again = generate(NexmarkConfig(events=N, seed=7))
    other = generate(NexmarkConfig(events=N, seed=8))
    for name in events.tables:
        assert events.tables[name].equals(again.tables[name]), name
        assert not events.tables[name].equals(other.tables[name]), name
        np.testing.assert_array_equal(events.arrival[name], again.arrival[name])


def test_event_mix_ids_and_times(events):
    person, auction, bid = (events.tables[t] for t in ("person", "auction", "bid"))
    assert (person.num_rows, auction.num_rows, bid.num_rows) == (1000, 3000, 46000)
    np.testing.assert_array_equal(person.column("id").to_numpy(), np.arange(1000, 2000))
    np.testing.assert_array_equal(auction.column("id").to_numpy(), np.arange(1000, 4000))
    # Event n is at base + n // 10 ms (10000 events/s); person n = 50 k, auctions 50 k + 1..3.
    np.testing.assert_array_equal(_millis(person, "dateTime"), BASE + np.arange(1000) * 5)
    k = np.arange(3000)
    numbers = (k // 3) * 50 + 1 + k % 3
    np.testing.assert_array_equal(_millis(auction, "dateTime"), BASE + numbers // 10)
    # In order: arrival is event time, nondecreasing.
    for name, table in events.tables.items():
        np.testing.assert_array_equal(events.arrival[name], _millis(table, "dateTime"))
        assert (np.diff(events.arrival[name]) >= 0).all()
    categories = auction.column("category").to_numpy()
    assert set(np.unique(categories)) == {10, 11, 12, 13, 14}
    expires = _millis(auction, "expires") - _millis(auction, "dateTime")
    assert expires.min() >= 1


def test_references_stay_in_the_windows(events):
    """Sellers and bidders among created or soon-created people; bids on auctions
    in flight or hot (the first of a batch of 100)."""
    bid, auction = events.tables["bid"], events.tables["auction"]
    bid_n = (_millis(bid, "dateTime") - BASE) * 10  # within 10 of the event number
    last_person = bid_n // 50 + 1000
    bidder = bid.column("bidder").to_numpy()
    assert (bidder <= last_person + 10 + 1).all()
    assert (bidder >= last_person - 1000 - 1).all()
    hot_bidder = np.mean(bidder % 100 == 1)
    assert 0.7 < hot_bidder < 0.85  # 3/4 hot, plus cold ones that land on a hot id
    auction_of_bid = bid.column("auction").to_numpy()
    hot = np.mean(auction_of_bid % 100 == 0)
    assert 0.45 < hot < 0.6  # 1/2 hot
    assert (auction_of_bid <= (bid_n // 50) * 3 + 1003 + 10).all()
    seller = auction.column("seller").to_numpy()
    assert 0.7 < np.mean(seller % 100 == 0) < 0.85


def test_prices_are_log_uniform(events):
    price = events.tables["bid"].column("price").to_numpy()
    assert price.min() >= 100 and price.max() <= 100_000_000
    decades = np.histogram(np.log10(price / 100), bins=6, range=(0, 6))[0] / len(price)
    assert np.allclose(decades, 1 / 6, atol=0.02), decades


def test_fields_look_like_the_reference(events):
    person = events.tables["person"].to_pandas()
    assert person["creditCard"].str.fullmatch(r"\d{4} \d{4} \d{4} \d{4}").all()
    assert person["emailAddress"].str.fullmatch(r"[a-z ]*@[a-z ]*\.com").all()
    assert set(person["state"]) <= {"AZ", "CA", "ID", "OR", "WA", "WY"}
    assert person["name"].str.fullmatch(r"[A-Za-z]+ [A-Za-z]+").all()
    bid = events.tables["bid"].to_pandas()
    hot = bid["channel"].isin(["Google", "Facebook", "Baidu", "Apple"])
    assert 0.45 < hot.mean() < 0.55
    assert bid["url"].str.startswith("https://www.nexmark.com/").all()
    assert bid.loc[~hot, "channel"].str.fullmatch(r"channel-\d+").all()
    # Each channel has one URL.
    assert (bid.groupby("channel")["url"].nunique() == 1).all()
    sizes = bid["extra"].str.len() + 32
    assert abs(sizes.mean() - 100) < 2


def test_out_of_order_arrival_is_bounded_and_seeded(events, shuffled):
    late = 0
    for name, table in shuffled.tables.items():
        times = _millis(table, "dateTime")
        delay = shuffled.arrival[name] - times
        assert delay.min() >= 0 and delay.max() <= 2000
        assert (np.diff(shuffled.arrival[name]) >= 0).all()
        late += int((np.diff(times) < 0).sum())
        # The same events as in order, only arriving differently.
        in_order = events.tables[name].to_pandas()
        mixed = table.to_pandas()
        pd.testing.assert_frame_equal(
            in_order.sort_values(list(in_order.columns), ignore_index=True),
            mixed.sort_values(list(mixed.columns), ignore_index=True),
        )
    assert late > 1000  # arrival order differs from event-time order


def test_files(tmp_path, shuffled):
    written = write(shuffled, tmp_path, events_per_file=7000, watermark_every_ms=500, step_ms=30)
    assert len(written["parquet"]) == 3 * 8
    for name, table in shuffled.tables.items():
        parts = sorted((tmp_path / name).glob("*.parquet"))
        assert pa.concat_tables([pq.read_table(p) for p in parts]).equals(table)
        sizes = [pq.read_metadata(p).num_rows for p in parts]
        assert sum(sizes) == table.num_rows
        csv = pd.read_csv(tmp_path / f"{name}.csv", header=None)
        assert len(csv) == table.num_rows
        replay = read_replay(
            tmp_path / f"{name}.jsonl", name, "dateTime", {"dateTime": "TIMESTAMP(3)"}
        )
        frame = replay.frame
        assert len(frame) == table.num_rows
        ptime = frame["__ptime"].to_numpy()
        assert (ptime >= shuffled.arrival[name]).all() and (ptime % 30 == 0).all()
        np.testing.assert_array_equal(ptime, steps(shuffled.arrival[name], 30))
        # The watermarks are exact: no row of a later step is older than one (the
        # rows of its own step are before it: a step's watermark follows its rows).
        times = frame["dateTime"].astype("int64").to_numpy() // 1_000_000
        for at, mark in replay.watermarks.itertuples(index=False):
            later = times[ptime > at]
            assert later.size == 0 or later.min() > mark
        assert replay.watermarks["watermark"].iloc[-1] > times.max()
    per_file = np.zeros(8, dtype=int)
    for name in shuffled.tables:
        per_file += [pq.read_metadata(p).num_rows for p in sorted((tmp_path / name).glob("*"))]
    assert per_file.tolist() == [7000] * 7 + [1000]
    first = json.loads((tmp_path / "bid.jsonl").read_text().splitlines()[0])
    assert set(first) == {"ptime", "row"}


def test_files_written_again_replace_the_earlier_ones(tmp_path, shuffled):
    """Writing into the folder of an earlier write with more files leaves only this
    write's: a file stream over it reads these events, none of the earlier ones."""
    write(shuffled, tmp_path, ["parquet"], events_per_file=7000)
    write(shuffled, tmp_path, ["parquet"], events_per_file=25_000)
    for name, table in shuffled.tables.items():
        parts = sorted((tmp_path / name).glob("*.parquet"))
        assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet"]
        assert pa.concat_tables([pq.read_table(p) for p in parts]).equals(table)


def test_cli(tmp_path, capsys):
    rc = main(["generate", "--events", "500", "--out", str(tmp_path), "--format", "parquet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "generated 500 events (person 10, auction 30, bid 460)" in out and "events/s" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auction", "bid", "person"]
    assert main(["generate", "--events", "5", "--out", str(tmp_path), "--format", "xml"]) == 2


DOC = Path(__file__).resolve().parents[2] / "docs" / "nexmark.md"


def _doc_commands(prefix: str) -> list[list[str]]:
    return [
        shlex.split(line[2:])[1:]
        for line in DOC.read_text().splitlines()
        if line.startswith(f"$ headwater {prefix}")
    ]


def test_docs_generate_command_runs_as_written(tmp_path, monkeypatch, capsys):
    commands = _doc_commands("nexmark generate")
    assert commands
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        assert cli_main(argv) == 0
    assert "events/s" in capsys.readouterr().out
    assert (tmp_path / "tmp" / "nexmark" / "bid.jsonl").exists()


def test_docs_bench_commands_parse():
    from headwater.bench.nexmark import parse_args

    commands = _doc_commands("bench nexmark")
    assert commands
    for argv in commands:
        parse_args(argv[2:])
