"""Idle keys: when each key last had an element, for a state time-to-live.

A front end that bounds a key's state by a time-to-live (SQL's ``'state.ttl'``)
drops the state of the keys that had no element for the TTL, in processing
time. Both runners keep one :class:`IdleKeys` next to the reducer: the local
runner for the whole query, the Spark runner per shard in its state store
(:meth:`IdleKeys.snapshot`), so that a restarted query keeps the idle times.
"""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd

#: The version of :meth:`IdleKeys.snapshot`'s format.
SNAPSHOT_VERSION = 1


class IdleKeys:
    """The processing time of each key's last element, to find the keys idle for
    ``ttl`` (ms). Vectorized: one mask over the keys per step."""

    def __init__(self, ttl: int, last: pd.Series | None = None) -> None:
        self.ttl = ttl
        # by key: the processing time of its last element
        self.last = last if last is not None else pd.Series(dtype=np.int64)

    def expired(self, now: int) -> np.ndarray:
        """The keys idle for the TTL at ``now`` (last touched at or before ``now -
        ttl``), which are forgotten here."""
        gone = self.last.to_numpy(np.int64) + self.ttl <= now
        keys = self.last.index[gone].to_numpy(object)
        if len(keys):
            self.last = self.last[~gone]
        return keys

    def touch(self, keys: np.ndarray, now: int) -> None:
        """Elements of ``keys`` arrived at ``now``."""
        fresh = pd.Index(pd.unique(np.asarray(keys, dtype=object)))
        kept = self.last[~self.last.index.isin(fresh)]
        self.last = pd.concat([kept, pd.Series(now, index=fresh, dtype=np.int64)])

    def snapshot(self) -> bytes:
        """The idle times as bytes (a runner's state store)."""
        keys = self.last.index.to_numpy(object)
        return pickle.dumps((SNAPSHOT_VERSION, keys, self.last.to_numpy(np.int64)))

    @classmethod
    def restore(cls, ttl: int, blob: bytes | None) -> IdleKeys:
        """The idle times of a :meth:`snapshot` (``None``: no key seen yet)."""
        if not blob:
            return cls(ttl)
        version, keys, times = pickle.loads(blob)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"idle-key state of version {version}; this headwater reads 1")
        return cls(ttl, pd.Series(times, index=pd.Index(keys, dtype=object), dtype=np.int64))
