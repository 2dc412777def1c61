"""The NEXMark generator's configuration: the reference's defaults.

The values are those of the Flink NEXMark repository's ``NexmarkConfiguration``
and ``GeneratorConfig`` (nexmark/nexmark, nexmark-flink/.../generator): the
proportion period of 50 events (1 person, 3 auctions, 46 bids), the first ids,
the hot ratios, the auctions in flight and the active people windows, and the
inter-event delay of 1e6 / rate microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

#: First ids, as the reference starts them (so small data sets still find matches).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
#: Categories are 10..14: few, so that the queries find matches on small data.
NUM_CATEGORIES = 5
#: Ids up to this many ahead of the last created person / auction may be chosen.
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
#: Hot sellers / bidders / auctions are the first of a batch of this many.
HOT_BATCH = 100
#: The reference's base time of event time (Beam's NexmarkUtils.BASE_TIME).
BASE_TIME = "2015-07-15T00:00:00"


@dataclass(frozen=True)
class NexmarkConfig:
    """What to generate. ``out_of_order_ms`` > 0 delays each event's arrival by a
    seeded uniform 0..out_of_order_ms (event times are unchanged)."""

    events: int
    seed: int = 0
    first_event_rate: int = 10_000
    base_time: str = BASE_TIME
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    out_of_order_ms: int = 0

    def __post_init__(self) -> None:
        if self.events < 0:
            raise ValueError(f"events must be >= 0, not {self.events}")
        if self.first_event_rate <= 0:
            raise ValueError(f"first_event_rate must be > 0, not {self.first_event_rate}")
        if self.out_of_order_ms < 0:
            raise ValueError(f"out_of_order_ms must be >= 0, not {self.out_of_order_ms}")
        if min(self.person_proportion, self.auction_proportion, self.bid_proportion) <= 0:
            raise ValueError("the person, auction and bid proportions must be > 0")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        """Microseconds between two events (one generator)."""
        return 1_000_000.0 / self.first_event_rate

    @property
    def base_time_ms(self) -> int:
        return int(pd.Timestamp(self.base_time).value // 1_000_000)
