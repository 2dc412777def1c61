"""GroupParts, the fast path's per-group state: after any sequence of steps (take
the fired groups' rows, add their new ones, expire windows) it holds what a plain
mapping group -> row holds, with real hashes and with hashes that collide; and it
stays a logarithmic number of parts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from headwater.sql.maintain.group_parts import AT, GroupParts, group_arrays, group_hashes

GROUP = ["__gk", "__gs", "__ge"]


def groups(ids: np.ndarray) -> pd.DataFrame:
    """Group ``i``: key text ``k{i % 50}``, a window of its own per ``i // 50``."""
    start = (ids // 50) * 10
    return pd.DataFrame({"__gk": [f"k{i % 50}" for i in ids], "__gs": start, "__ge": start + 10})


def as_dict(frame: pd.DataFrame | None) -> dict:
    if frame is None:
        return {}
    keys = zip(frame["__gk"], frame["__gs"].astype(int), frame["__ge"].astype(int), strict=True)
    return dict(zip(keys, frame["value"].astype(int), strict=True))


@pytest.mark.parametrize("colliding", [False, True])
def test_parts_hold_what_a_mapping_holds(colliding: bool) -> None:
    rng = np.random.default_rng(7)
    parts, model = GroupParts(), {}
    hashed = (lambda f: group_hashes(f) & np.uint64(3)) if colliding else group_hashes
    universe, horizon = 0, 0
    for step in range(120):
        old_ids = rng.choice(universe, min(universe, int(rng.integers(0, 40))), replace=False)
        new_ids = np.arange(universe, universe + int(rng.integers(0, 60)))
        universe += len(new_ids)
        fired = groups(np.r_[old_ids, new_ids].astype(np.int64)).assign(**{AT: 0})
        fired[AT] = np.arange(len(fired))
        taken = parts.take(group_arrays(fired), fired[AT].to_numpy(), hashed(fired))
        fired_keys = set(as_dict(fired.assign(value=0)))
        want = {k: v for k, v in model.items() if k in fired_keys}
        got = {} if taken is None else as_dict(taken)
        assert got == want, step
        if taken is not None:  # each taken row carries its group's position in fired
            at = dict(zip(as_dict(fired.assign(value=0)), fired[AT], strict=True))
            assert [at[k] for k in as_dict(taken)] == list(taken[AT])
        for key in want:
            del model[key]
        keep = fired[rng.random(len(fired)) < 0.8]
        rows = keep[GROUP].assign(value=rng.integers(0, 1000, len(keep)))
        parts.add(rows, hashed(rows))
        model.update(as_dict(rows))
        if step % 10 == 9:
            horizon += 10
            parts.expire(horizon)
            model = {k: v for k, v in model.items() if k[2] > horizon}
        assert as_dict(parts.frame()) == model and len(parts) == len(model), step
        assert len(parts.parts) <= 2 * math.log2(len(model) + 2) + 2, step
