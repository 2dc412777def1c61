"""Streams of Spark's Python data sources, each query with a registration of its own.

Spark keeps one ``PythonFunction`` per registration, and every query loaded from
it shares that function's environment map: the driver's source runner of each
query writes into it when the query starts, while the scheduler may be
serializing another query's tasks that hold the same map. Queries started at
once from several threads of one session (the transcripts on Spark) then failed
with ``java.io.OptionalDataException`` in task deserialization. Registering and
loading under one lock gives each query the registration it made.
"""

from __future__ import annotations

import threading
from typing import Any

_LOADING = threading.Lock()


def read_stream(spark: Any, source: type, options: dict[str, str]) -> Any:
    """``spark.readStream`` of the Python data source class ``source`` with
    ``options``, from a registration no other query shares."""
    with _LOADING:
        spark.dataSource.register(source)
        return spark.readStream.format(source.name()).options(**options).load()
