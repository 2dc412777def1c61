"""NEXMark's user functions as headwater Python functions.

Flink's NEXMark q14 calls ``count_char``, a Java class; in headwater a script
imports this one instead::

    CREATE FUNCTION count_char AS 'headwater.sql.nexmark_udfs.count_char' LANGUAGE PYTHON;
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from headwater.sql.plan.functions import function


@function("BIGINT", ["VARCHAR", "VARCHAR"])
def count_char(text: pd.Series, char: pd.Series) -> pd.Series:
    """How many times the first character of ``char`` occurs in ``text`` (0 for a
    NULL text), as NEXMark's ``CountChar``; one vectorized count per distinct ``char``."""
    first = char.str[:1]
    out = np.zeros(len(text), dtype=np.int64)
    for c in first.dropna().unique():
        if not c:
            continue  # an empty char occurs nowhere: 0
        rows = (first == c).to_numpy()
        out[rows] = text[rows].str.count(re.escape(c)).fillna(0).to_numpy(np.int64)
    return pd.Series(out)
