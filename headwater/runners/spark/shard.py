"""Shards: how user keys map onto the stateful operator's grouping key.

The streaming runner groups by a small integer *shard* (hash of the user key
mod N), not by the user key: one shard's windows are one state value, updated
with vectorized code, so state is touched a few times per shard per
micro-batch instead of once per key (DESIGN.md, performance).

Spark hash-partitions the stateful operator's input by
``pmod(murmur3(shard), P)``. With shard numbers ``0..N-1`` two shards often
land in the same partition while another partition stays idle. So shard ``i``
is represented by a *partition-aligned id*: the smallest non-negative int
``v`` with ``pmod(murmur3(v), N) == i``. When ``N`` equals the number of
shuffle partitions (the default), every partition gets exactly one shard.

The ids depend on ``N`` only (never on the current shuffle-partition setting,
which a restarted query ignores in favour of its checkpoint): they name state
keys and must not change between runs of one query.
"""

from __future__ import annotations

from functools import lru_cache

_SEED = 42  # Spark's Murmur3Hash seed (functions.hash, HashPartitioning)
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_int(value: int, seed: int = _SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (a signed 32-bit result)."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = (seed & _M32) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


@lru_cache(maxsize=64)
def aligned_shard_ids(num_shards: int) -> tuple[int, ...]:
    """Id of every shard ``0..num_shards-1`` such that Spark's hash partitioning
    into ``num_shards`` partitions sends shard ``i`` to partition ``i``."""
    if num_shards < 1:
        raise ValueError("num_shards must be at least 1")
    ids: list[int | None] = [None] * num_shards
    missing = num_shards
    v = 0
    while missing:
        p = murmur3_int(v) % num_shards  # Python's % is already pmod
        if ids[p] is None:
            ids[p] = v
            missing -= 1
        v += 1
    return tuple(int(i) for i in ids)  # type: ignore[arg-type]


def shard_column(key_cols: list[str], num_shards: int):
    """Spark Column: the aligned shard id of each row's key (native, no Python)."""
    from pyspark.sql import functions as F

    ids = aligned_shard_ids(num_shards)
    bucket = F.pmod(F.hash(*[F.col(c) for c in key_cols]), F.lit(num_shards))
    table = F.array(*[F.lit(i) for i in ids])
    return F.element_at(table, bucket + F.lit(1)).cast("int")
