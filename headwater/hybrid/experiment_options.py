"""What the hybrid-model experiment can be asked for (its runners, how throughput
is measured): shared by :mod:`headwater.hybrid.experiment`, which runs it, and
:mod:`headwater.hybrid.experiment_args`, its command line, which must not import
the experiment (pandas, matplotlib) so that ``--help`` prints at once."""

from __future__ import annotations

from dataclasses import dataclass

#: Where the stream module runs (``--runner``): the keys of ``experiment.RUNNERS``.
RUNNER_NAMES = ("local", "spark")


@dataclass(frozen=True)
class Throughput:
    """How the stream module's throughput is measured: the shard counts; on Spark the
    masters, the tuples of the stream used (``events``: its first ones, all if None)
    multiplied by ``density`` (:func:`headwater.hybrid.on_spark.densify`: by default
    2,000,000 tuples on 800 keys, 160,000 tuples per second of arrival; docs/hybrid.md,
    "Throughput"), and how often each count runs (the fastest run counts)."""

    shards: tuple[int, ...] = (1, 2, 4)
    masters: tuple[str, ...] = ("local[*]", "local-cluster[2,1,2048]")
    events: int | None = 40_000
    density: int = 50
    repeats: int = 3


DEFAULT_THROUGHPUT = Throughput()
