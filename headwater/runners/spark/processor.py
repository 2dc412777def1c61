"""The stateful processor handed to ``transformWithStateInPandas``.

This module imports only PySpark's streaming API (and its types, which that
API imports). Spark starts a fresh Python
process on the driver at every query start to run the processor's ``init``
(to learn its state schemas); keeping pandas, pyarrow and the core out of
that process saves about 0.3 s per query start. The runner's logic
(:class:`headwater.runners.spark.shard_logic.ShardLogic`) and its plan (pickled
with cloudpickle, so user combiners defined in ``__main__`` travel too) are
loaded on first use, in the executors' reused Python workers.
"""

from __future__ import annotations

import pickle
from typing import Any

from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

# The state schemas are StructTypes, not DDL strings: PySpark sends a DDL string to
# the JVM to be parsed (one more round trip per state, at the driver's pre-init
# and at every task's ``init``); these are the types that parse gives.
_BLOB = StructField("blob", BinaryType())
#: One value per shard: the Reducer's snapshot and the shard's event-time timer.
STATE_SCHEMA = StructType([_BLOB, StructField("timer", LongType())])
#: The snapshot of a pane transform's state (a plan with one).
TRANSFORM_SCHEMA = StructType([_BLOB])
#: The snapshot of a shard-derived watermark's state (a K-slack tracker).
WATERMARK_SCHEMA = StructType([_BLOB])
#: The snapshot of a shard's idle keys (a state time-to-live: ``model.idle``).
IDLE_SCHEMA = StructType([_BLOB])


class ShardProcessor(StatefulProcessor):
    """Runs one shard's Reducer per micro-batch (grouping key: the shard id)."""

    def __init__(
        self,
        plan_blob: bytes,
        has_transform: bool = False,
        derives_watermark: bool = False,
        has_ttl: bool = False,
    ) -> None:
        self.plan_blob = plan_blob
        self.has_transform = has_transform
        self.derives_watermark = derives_watermark
        self.has_ttl = has_ttl
        self._logic: Any = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("reducer", STATE_SCHEMA)
        self.transform_state = (
            handle.getValueState("transform", TRANSFORM_SCHEMA) if self.has_transform else None
        )
        self.watermark_state = (
            handle.getValueState("watermark", WATERMARK_SCHEMA) if self.derives_watermark else None
        )
        self.idle_state = handle.getValueState("idle", IDLE_SCHEMA) if self.has_ttl else None
        self._logic = None

    def _impl(self) -> Any:
        if self._logic is None:
            from headwater.runners.spark.shard_logic import ShardLogic

            self._logic = ShardLogic(
                pickle.loads(self.plan_blob),
                self.handle,
                self.state,
                self.transform_state,
                self.watermark_state,
                self.idle_state,
            )
        return self._logic

    def handleInputRows(self, key, rows, timerValues):
        yield from self._impl().input_rows(rows, timerValues, key[0])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield from self._impl().expired(timerValues, expiredTimerInfo.getExpiryTimeInMs())

    def close(self) -> None:
        self._logic = None
