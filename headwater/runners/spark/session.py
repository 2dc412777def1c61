"""What headwater needs of a SparkSession it did not make (a user's own).

A session made with ``SparkSession.builder.getOrCreate()`` and Spark's defaults
lacks three things headwater's streaming queries need. headwater checks the
first and sets the others for its own queries only, never for the session:

* **the workers' Python imports headwater**: the stateful step runs inside
  Spark's Python workers, which unpickle headwater's code. Without it a query
  dies deep in a worker with ``No module named 'headwater'``.
  :func:`check_workers` runs one tiny job per SparkContext that imports
  headwater in a worker and raises :class:`WorkerPythonError` (the worker's
  interpreter and the fix) when it cannot;
* **few shuffle partitions**: a stateful operator runs one task per shuffle
  partition in every micro-batch, each committing a state-store version, and
  Spark's default is 200. headwater groups by a few shards
  (:func:`default_shards`: the session's shuffle partitions, at most its
  default parallelism, i.e. its cores), so its queries start with as many
  shuffle partitions as shards;
* **the RocksDB state store**, which ``transformWithStateInPandas`` needs
  (Spark refuses the default one with STORE_BACKEND_NOT_SUPPORTED_FOR_TWS).

The last two are set by :func:`starting_query` around the start of a query only:
a streaming query copies the session's configuration when it starts and keeps
the shuffle partitions and the state store in its checkpoint, so the user's
setting is restored at once and other queries of the session are not affected.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: Settings of the local sessions headwater makes (its CLI's, the demo's, the hybrid
#: runs', the benchmarks', the tests'): checkpoints written through Hadoop's
#: ``FileSystem`` API.
#: Spark's default manager renames each checkpoint file through ``FileContext``,
#: which on the local file system starts a ``readlink`` process for each path of
#: each rename (Hadoop's ``FileUtil.readLink``): on tiny micro-batches, most of the
#: processes a query starts. ``FileSystem.rename`` on a local disk is one atomic
#: rename(2), and both managers write the same files, so a checkpoint moves
#: between sessions with and without it (docs/spark.md).
LOCAL_CHECKPOINT_CONF: dict[str, str] = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
}
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
PARTITIONS_CONF = "spark.sql.shuffle.partitions"


class WorkerPythonError(RuntimeError):
    """Spark's Python workers cannot run headwater (raised before a query starts)."""


def default_shards(spark: Any) -> int:
    """The shard count of a query that names none: the session's shuffle partitions,
    at most its default parallelism (more shards than cores only add tasks to every
    micro-batch). Pass ``num_shards`` to choose; keep it for the life of a checkpoint."""
    partitions = int(spark.conf.get(PARTITIONS_CONF))
    context = _context(spark)
    if context is None:
        return partitions
    return max(1, min(partitions, int(context.defaultParallelism)))


#: Held while a query starts: the configuration set for it is the session's, so two
#: threads starting queries with different shard counts would otherwise swap them.
_STARTING = threading.RLock()


@contextlib.contextmanager
def starting_query(spark: Any, shards: int | None = None) -> Iterator[None]:
    """Start a headwater streaming query inside: its workers checked, the RocksDB
    state store and ``shards`` shuffle partitions (default :func:`default_shards`)
    set for this query only (the session's own values are restored on exit). One
    thread of the process at a time starts its query inside."""
    with _STARTING:
        check_workers(spark)
        wanted = {
            PROVIDER_CONF: ROCKSDB_PROVIDER,
            PARTITIONS_CONF: str(shards or default_shards(spark)),
        }
        previous = {key: spark.conf.get(key, None) for key in wanted}
        for key, value in wanted.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            restore_conf(spark, previous)


def restore_conf(spark: Any, previous: dict[str, str | None]) -> None:
    """Put back settings read with ``spark.conf.get(key, None)``: a ``None`` was unset."""
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


#: Application ids of the SparkContexts whose workers import this headwater.
_CHECKED: set[str] = set()

# Compiled from text so that cloudpickle ships it by value: a function of a
# headwater module would be pickled by reference, and a worker without headwater
# would fail to unpickle the probe itself instead of reporting what it lacks.
_PROBE = """
def probe(_rows):
    import sys
    try:
        import headwater
    except Exception as exc:
        yield sys.executable, None, f"{type(exc).__name__}: {exc}"
    else:
        yield sys.executable, headwater.__version__, None
"""


def check_workers(spark: Any) -> None:
    """Raise :class:`WorkerPythonError` unless the session's Python workers import
    this version of headwater; one small job per SparkContext, then cached. Spark
    Connect sessions (no SparkContext here) are not checked."""
    context = _context(spark)
    if context is None or context.applicationId in _CHECKED:
        return
    from headwater import __version__

    configured = context.pythonExec
    namespace: dict[str, Any] = {"__name__": "headwater_worker_probe"}
    exec(_PROBE, namespace)  # noqa: S102 - a constant, see _PROBE
    try:
        executable, version, error = (
            context.parallelize([0], 1).mapPartitions(namespace["probe"]).collect()[0]
        )
    except Exception as exc:  # noqa: BLE001 - reported with its cause
        raise WorkerPythonError(_message(configured, f"a worker failed: {_cause(exc)}")) from exc
    if executable != configured:
        configured = f"{configured} (running {executable})"
    if error is not None:
        raise WorkerPythonError(_message(configured, f"it cannot import headwater ({error})"))
    if version != __version__:
        raise WorkerPythonError(
            _message(configured, f"it imports headwater {version}, the driver {__version__}")
        )
    _CHECKED.add(context.applicationId)


def _cause(exc: Exception) -> str:
    """The line of a failed job that says why: the worker's Python exception when
    there is one (a job's error wraps it in a Java stack trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if _ERROR_LINE.match(line)]
    plain = [line for line in lines if "." not in line.split(":")[0]]
    return (plain or lines or [type(exc).__name__])[0]


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def _message(interpreter: str, problem: str) -> str:
    return (
        f"Spark's Python workers use {interpreter}, and {problem}. headwater runs "
        "inside the workers. Fix: set PYSPARK_PYTHON to a Python that has headwater "
        "installed before the SparkSession starts (locally: the driver's Python, "
        "e.g. after `source .venv/bin/activate`); on a cluster, ship headwater to "
        "the executors with --py-files, a wheel, or an environment archive "
        "(spark.archives), see docs/spark.md."
    )


def _context(spark: Any) -> Any | None:
    """The session's SparkContext; None for Spark Connect, which has none here."""
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own error type
        return None
