"""Files stamped in arrival order (headwater/io/arrival.py): Spark's file source
reads files in modification-time order."""

from __future__ import annotations

import os

from headwater.io.arrival import in_arrival_order


def test_files_are_stamped_in_the_order_given_whatever_their_names(tmp_path):
    paths = [tmp_path / name for name in ("c", "a", "b")]
    for path in paths:
        path.write_text("x")
        os.utime(path, ns=(5, 5))  # one clock tick for all three
    in_arrival_order(paths)
    stamps = [os.stat(p).st_mtime_ns for p in paths]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    # whole milliseconds apart: Spark reads modification times in milliseconds
    assert {
        b // 1_000_000 - a // 1_000_000 for a, b in zip(stamps[:-1], stamps[1:], strict=True)
    } == {1}


def test_a_directory_stands_for_its_files_in_sorted_order(tmp_path):
    first, second = tmp_path / "1", tmp_path / "0"
    for folder in (first, second):
        (folder / "sub").mkdir(parents=True)
        for name in ("part-1", "part-0", "sub/part-2"):
            (folder / name).write_text("x")
    in_arrival_order([first, second])
    order = sorted(
        (p for p in tmp_path.rglob("*") if p.is_file()), key=lambda p: os.stat(p).st_mtime_ns
    )
    assert [str(p.relative_to(tmp_path)) for p in order] == [
        "1/part-0",
        "1/part-1",
        "1/sub/part-2",
        "0/part-0",
        "0/part-1",
        "0/sub/part-2",
    ]
