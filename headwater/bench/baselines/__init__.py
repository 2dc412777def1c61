"""The other engines a benchmark measures headwater against, when they take more than a
few lines: Spark's own Structured Streaming and Apache Flink's SQL for NEXMark.

A package, so that ``headwater bench`` does not list its modules as benchmarks.
"""
