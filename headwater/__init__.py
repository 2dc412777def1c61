"""headwater: the Dataflow Model on Apache Spark.

Event-time windowing, watermarks, triggers and accumulation/retraction
(the four questions: what, where, when, how) for out-of-order data,
executed by one engine-independent core on a deterministic local runner
and on Spark (batch plans and Structured Streaming) through PySpark.

Everything a pipeline needs is importable from here (``hw.from_spark``,
``hw.FixedWindows``, ``hw.AfterWatermark``, ``hw.sum``, ...); names are
resolved lazily so ``import headwater`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "headwater.api": None,  # every name in headwater.api.__all__
    "headwater.runners.local": ("LocalRunner", "TestStream"),
    "headwater.model.reducer": ("Reducer", "Emission"),
    "headwater.model.combiners": ("CombineFn",),
    "headwater.sql": ("sql",),
    "headwater.model.slack": ("FixedSlack", "MaxDelaySlack", "QualityDriven"),
    "headwater.model.quality": ("QualityRequirement",),
}


def __getattr__(name: str) -> Any:
    for module_name, names in _LAZY.items():
        module = importlib.import_module(module_name)
        exported = getattr(module, "__all__", ()) if names is None else names
        if name in exported:
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'headwater' has no attribute {name!r}")


def __dir__() -> list[str]:
    names = set(globals())
    for module_name, exported in _LAZY.items():
        if exported is None:
            exported = importlib.import_module(module_name).__all__
        names.update(exported)
    return sorted(names)
