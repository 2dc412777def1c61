"""headwater: the Dataflow Model on Apache Spark.

Event-time windowing, watermarks, triggers and accumulation/retraction
(the four questions: what, where, when, how) for out-of-order data,
executed by one engine-independent core on a deterministic local runner
and on Spark (batch plans and Structured Streaming) through PySpark.
"""

__version__ = "0.1.0"
