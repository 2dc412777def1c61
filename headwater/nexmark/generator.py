"""The NEXMark event generator, vectorized over event numbers.

Event number ``n`` (0, 1, ...) is a person, an auction or a bid by its place in
the proportion period (``n % 50``: 0 a person, 1..3 auctions, 4..49 bids); its
event time is ``base + floor(n * inter_event_delay_us) // 1000`` ms. Ids,
sellers, bidders and auctions follow the reference generator (nexmark/nexmark,
Flink's ``PersonGenerator``/``AuctionGenerator``/``BidGenerator``): new ids count
up from 1000, a seller / bidder / auction is "hot" (the first of the last batch
of 100) with probability 1 - 1/ratio, else drawn from the active people or the
auctions in flight (plus a lead of 10 ids not created yet). The random values
come from numpy's PCG64 seeded with ``seed``: the same distributions as the
reference, not its values, and the same seed gives the same events.

Arrival: in order of event time (the reference), or, with ``out_of_order_ms``,
each event arrives a seeded uniform 0..out_of_order_ms after its event time (a
random stream of its own: the events are those of the in-order run) and the
events are ordered by arrival (ties by event number).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.nexmark import strings as S
from headwater.nexmark.config import (
    AUCTION_ID_LEAD,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_BATCH,
    NUM_CATEGORIES,
    PERSON_ID_LEAD,
    NexmarkConfig,
)

TABLES = ("person", "auction", "bid")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah")
FIRST_NAMES += ("Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones")
LAST_NAMES += ("Noris",)
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS = 10_000
TS = pa.timestamp("ms")


@dataclass(frozen=True)
class NexmarkEvents:
    """The three tables in arrival order. ``arrival[t]``: each row's arrival time
    (epoch ms, the replay's processing time); ``position[t]``: its place in the
    arrival order of all events (0..events-1), to cut files of N events."""

    config: NexmarkConfig
    tables: dict[str, pa.Table]
    arrival: dict[str, np.ndarray]
    position: dict[str, np.ndarray]
    seconds: float

    @property
    def events(self) -> int:
        return sum(t.num_rows for t in self.tables.values())

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def event_times(config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """Event time (epoch ms) of event numbers, as the reference's timestampForEvent."""
    offset = np.floor(numbers * config.inter_event_delay_us).astype(np.int64) // 1000
    return config.base_time_ms + offset


def last_person(config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """The last person id created by event ``n`` (base 0; its own id for a person)."""
    epoch, offset = np.divmod(numbers, config.total_proportion)
    offset = np.minimum(offset, config.person_proportion - 1)
    return epoch * config.person_proportion + offset


def last_auction(config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """The last auction id created by event ``n`` (base 0; its own for an auction)."""
    epoch, offset = np.divmod(numbers, config.total_proportion)
    before = offset < config.person_proportion
    epoch = np.where(before, epoch - 1, epoch)
    offset = np.clip(offset - config.person_proportion, 0, config.auction_proportion - 1)
    offset = np.where(before, config.auction_proportion - 1, offset)
    return epoch * config.auction_proportion + offset


def some_person(rng, config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """A random active person (or one of the next few to come), base 0."""
    people = last_person(config, numbers) + 1
    active = np.minimum(people, config.num_active_people)
    return people - active + _below(rng, active + PERSON_ID_LEAD)


def some_auction(rng, config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """A random auction in flight (or one of the next few to come), base 0."""
    newest = last_auction(config, numbers)
    oldest = np.maximum(newest - config.num_in_flight_auctions, 0)
    return oldest + _below(rng, newest - oldest + 1 + AUCTION_ID_LEAD)


def _below(rng, n: np.ndarray) -> np.ndarray:
    """Uniform integers in [0, n) per element."""
    return rng.integers(0, np.asarray(n, dtype=np.int64))


def _hot(rng, ratio: int, size: int) -> np.ndarray:
    """True with probability 1 - 1/ratio (the reference's ``nextInt(ratio) > 0``)."""
    return rng.integers(0, ratio, size) > 0


def prices(rng, size: int) -> np.ndarray:
    """The reference's prices: round(10 ** U[0, 6) * 100) cents, log-uniform."""
    return np.floor(10.0 ** (rng.random(size) * 6.0) * 100.0 + 0.5).astype(np.int64)


def persons(rng, config: NexmarkConfig, numbers: np.ndarray, text: np.ndarray) -> pa.Table:
    size = len(numbers)
    name = S.join(S.choice(rng, FIRST_NAMES, size), S.choice(rng, LAST_NAMES, size), separator=" ")
    email = S.join(S.random_strings(rng, size, 7), "@", S.random_strings(rng, size, 5), ".com")
    groups = [
        pc.utf8_lpad(pc.cast(pa.array(rng.integers(0, 10_000, size)), pa.string()), 4, "0")
        for _ in range(4)
    ]
    card = S.join(*groups, separator=" ")
    city, state = S.choice(rng, US_CITIES, size), S.choice(rng, US_STATES, size)
    current = 8 + sum(S.lengths(a) for a in (name, email, card, city, state))
    return pa.table(
        {
            "id": last_person(config, numbers) + FIRST_PERSON_ID,
            "name": name,
            "emailAddress": email,
            "creditCard": card,
            "city": city,
            "state": state,
            "dateTime": pa.array(event_times(config, numbers), TS),
            "extra": S.extras(rng, text, current, config.avg_person_byte_size),
        }
    )


def auctions(rng, config: NexmarkConfig, numbers: np.ndarray, text: np.ndarray) -> pa.Table:
    size = len(numbers)
    hot_seller = (last_person(config, numbers) // HOT_BATCH) * HOT_BATCH
    seller = np.where(
        _hot(rng, config.hot_sellers_ratio, size), hot_seller, some_person(rng, config, numbers)
    )
    times = event_times(config, numbers)
    ahead = config.num_in_flight_auctions * config.total_proportion // config.auction_proportion
    horizon = event_times(config, numbers + ahead) - times
    expires = times + 1 + _below(rng, np.maximum(horizon * 2, 1))
    item, description = S.random_strings(rng, size, 20), S.random_strings(rng, size, 100)
    initial = prices(rng, size)
    current = 8 + S.lengths(item) + S.lengths(description) + 40
    return pa.table(
        {
            "id": last_auction(config, numbers) + FIRST_AUCTION_ID,
            "itemName": item,
            "description": description,
            "initialBid": initial,
            "reserve": initial + prices(rng, size),
            "dateTime": pa.array(times, TS),
            "expires": pa.array(expires, TS),
            "seller": seller + FIRST_PERSON_ID,
            "category": FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, size),
            "extra": S.extras(rng, text, current, config.avg_auction_byte_size),
        }
    )


def base_urls(rng, size: int) -> pa.Array:
    """The reference's item URLs: three random path parts of 3..4 characters."""
    parts = [S.random_strings(rng, size, 5, special="_") for _ in range(3)]
    return S.join("https://www.nexmark.com", *parts, "item.htm?query=1", separator="/")


def channel_urls(rng) -> pa.Array:
    """The URL of each of the 10000 cold channels: nine in ten carry a channel_id
    (the bit-reversed channel number, as the reference writes it)."""
    urls = base_urls(rng, CHANNELS)
    numbers = np.arange(CHANNELS, dtype=np.uint32)
    reversed_bits = np.zeros(CHANNELS, dtype=np.uint32)
    for bit in range(32):  # 32 vector steps, not a loop over values
        reversed_bits |= ((numbers >> bit) & 1) << (31 - bit)
    ids = np.abs(reversed_bits.view(np.int32).astype(np.int64))
    tagged = S.join(urls, "&channel_id=", pc.cast(pa.array(ids), pa.string()))
    return pc.if_else(pa.array(rng.integers(0, 10, CHANNELS) > 0), tagged, urls)


def bids(rng, config: NexmarkConfig, numbers: np.ndarray, text: np.ndarray) -> pa.Table:
    size = len(numbers)
    hot_auction = (last_auction(config, numbers) // HOT_BATCH) * HOT_BATCH
    auction = np.where(
        _hot(rng, config.hot_auction_ratio, size), hot_auction, some_auction(rng, config, numbers)
    )
    hot_bidder = (last_person(config, numbers) // HOT_BATCH) * HOT_BATCH + 1
    bidder = np.where(
        _hot(rng, config.hot_bidders_ratio, size), hot_bidder, some_person(rng, config, numbers)
    )
    channel, url = _channels(rng, size)
    return pa.table(
        {
            "auction": auction + FIRST_AUCTION_ID,
            "bidder": bidder + FIRST_PERSON_ID,
            "price": prices(rng, size),
            "channel": channel,
            "url": url,
            "dateTime": pa.array(event_times(config, numbers), TS),
            "extra": S.extras(rng, text, np.full(size, 32), config.avg_bid_byte_size),
        }
    )


def _channels(rng, size: int) -> tuple[pa.Array, pa.Array]:
    """Half the bids come through one of four hot channels, the rest through one
    of 10000 channels ``channel-<i>`` with a fixed URL each."""
    names = pa.array(list(HOT_CHANNELS) + [f"channel-{i}" for i in range(CHANNELS)])
    urls = pa.concat_arrays([base_urls(rng, len(HOT_CHANNELS)), channel_urls(rng)])
    hot = _hot(rng, 2, size)
    which = np.where(
        hot,
        rng.integers(0, len(HOT_CHANNELS), size),
        len(HOT_CHANNELS) + rng.integers(0, CHANNELS, size),
    )
    index = pa.array(which)
    return pc.take(names, index), pc.take(urls, index)


_MAKERS = {"person": persons, "auction": auctions, "bid": bids}


def generate(config: NexmarkConfig) -> NexmarkEvents:
    """The events of ``config``, each table in arrival order; times its own run."""
    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    text = S.letters(rng, S.REUSABLE_LENGTH)
    numbers = np.arange(config.events, dtype=np.int64)
    arrival = event_times(config, numbers)
    if config.out_of_order_ms:
        # A stream of its own: the same events as in order, only arriving differently.
        delays = np.random.default_rng([config.seed, 1])
        arrival = arrival + delays.integers(0, config.out_of_order_ms + 1, config.events)
    order = np.lexsort((numbers, arrival))
    position = np.empty(config.events, dtype=np.int64)
    position[order] = np.arange(config.events)
    kinds = _kinds(config, numbers)
    tables, arrivals, positions = {}, {}, {}
    for k, name in enumerate(TABLES):
        chosen = numbers[kinds == k]
        rank = np.argsort(position[chosen], kind="stable")
        table = _MAKERS[name](rng, config, chosen, text)
        tables[name] = table.take(pa.array(rank))
        chosen = chosen[rank]
        arrivals[name], positions[name] = arrival[chosen], position[chosen]
    return NexmarkEvents(config, tables, arrivals, positions, time.perf_counter() - started)


def _kinds(config: NexmarkConfig, numbers: np.ndarray) -> np.ndarray:
    """0 person, 1 auction, 2 bid: by the event's place in the proportion period."""
    offset = numbers % config.total_proportion
    auction_end = config.person_proportion + config.auction_proportion
    return np.where(offset < config.person_proportion, 0, np.where(offset < auction_end, 1, 2))
