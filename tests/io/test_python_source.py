"""Each query loads a Python data source from a registration of its own."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from headwater.io.python_source import read_stream


class _Source:
    @classmethod
    def name(cls) -> str:
        return "fake_source"


class _Recording:
    """A stand-in for a session: records registrations and loads, in order, and
    sleeps in each so that unguarded threads would interleave them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.registered = 0
        self.dataSource = self
        self.readStream = self

    def register(self, source: type) -> None:
        time.sleep(0.01)
        with self.lock:
            self.registered += 1
            self.events.append(("register", self.registered))

    def format(self, name: str) -> _Recording:
        assert name == "fake_source"
        return self

    def options(self, **options: str) -> _Recording:
        return self

    def load(self) -> int:
        time.sleep(0.01)
        with self.lock:
            self.events.append(("load", self.registered))
        return self.registered


def test_each_load_follows_its_own_registration():
    spark = _Recording()
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda i: read_stream(spark, _Source, {"i": str(i)}), range(12)))
    # every query read the registration made just before it: none shared
    assert sorted(loaded) == list(range(1, 13))
    expected = [(kind, n) for n in range(1, 13) for kind in ("register", "load")]
    assert spark.events == expected
