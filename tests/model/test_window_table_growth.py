"""WindowTable.append writes a step's new windows into room kept behind each
column (no copy of the rows kept): the columns must be what concatenating them
gives, also after the table is filtered, a column widened or rebound, and the
rows written before must not be changed by later appends."""

from __future__ import annotations

import numpy as np

from headwater.model.combiners import ToList
from headwater.model.window_table import WindowTable, concat


def _reference_append(cols, new, empty):
    full = dict(empty)
    full.update(new)
    return {name: concat(cols[name], full[name]) for name in cols}


def test_appends_equal_concatenation_through_keeps_widening_and_rebinding():
    rng = np.random.default_rng(5)
    table = WindowTable({}, {"v": (ToList(), "v")})
    expected = {name: col.copy() for name, col in table.cols.items()}
    for step in range(60):
        n = int(rng.integers(0, 9))
        new = {
            "key": rng.integers(0, 50, n),
            "start": rng.integers(0, 1000, n),
            "end": rng.integers(1000, 2000, n),
        }
        expected = _reference_append(expected, new, table.empty(n))
        rows = table.append(new)
        assert list(rows) == list(range(len(expected["key"]) - n, len(expected["key"])))
        if step % 7 == 3 and len(table):  # a filter: new arrays, not the backing's views
            keep = rng.random(len(table)) < 0.7
            table.keep(keep)
            expected = {name: col[keep] for name, col in expected.items()}
        if step % 11 == 5 and len(table):  # widened in place: a float pending count
            table.set("pending", np.array([0]), np.array([0.5]))
            expected["pending"] = expected["pending"].astype(np.float64)
            expected["pending"][0] = 0.5
        if step % 13 == 6:  # rebound, as the reducer remaps its keys
            table.cols["key"] = table.cols["key"] + 1
            expected["key"] = expected["key"] + 1
        for name, col in expected.items():
            got = table.cols[name]
            assert got.dtype == col.dtype, name
            assert len(got) == len(col), name
            if col.dtype == object:
                assert [list(x) if isinstance(x, list) else x for x in got] == list(col), name
            else:
                np.testing.assert_array_equal(got, col, err_msg=name)
