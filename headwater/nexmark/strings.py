"""Vectorized random strings: one Arrow array per call, no Python loop per value.

The distributions follow the reference's ``StringsGenerator``: a random string
of up to ``max_length`` characters has 3 + U[0, max_length - 3) characters, each
a lower-case letter or, one time in 13, a special character (a space, trimmed at
the ends); an "extra" pads a record to an average byte size with a slice of one
reusable random text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MIN_STRING_LENGTH = 3
#: Length of the reusable text that extras are sliced from (the reference's 1 MiB).
REUSABLE_LENGTH = 1024 * 1024


def from_codes(codes: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The strings whose bytes are ``codes`` (uint8, concatenated) of ``lengths``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.ascontiguousarray(codes, dtype=np.uint8)
    array = pa.LargeStringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets), pa.py_buffer(data)
    )
    return array.cast(pa.string())


def letters(rng: np.random.Generator, total: int) -> np.ndarray:
    """``total`` random lower-case letters as uint8 codes."""
    return (rng.integers(0, 26, total, dtype=np.uint8) + ord("a")).astype(np.uint8)


def random_strings(rng: np.random.Generator, n: int, max_length: int, special: str = " "):
    """``n`` strings as the reference's ``nextString(max_length, special)``."""
    lengths = MIN_STRING_LENGTH + rng.integers(0, max_length - MIN_STRING_LENGTH, n)
    total = int(lengths.sum())
    codes = letters(rng, total)
    codes[rng.integers(0, 13, total) == 0] = ord(special)
    strings = from_codes(codes, lengths)
    return pc.utf8_trim_whitespace(strings) if special == " " else strings


def extras(
    rng: np.random.Generator, text: np.ndarray, current: np.ndarray, average: int
) -> pa.Array:
    """Padding so that ``current`` + its length is ``average`` on average (the
    reference's ``nextExtra``): 0.8..1.2 times the missing size, never negative.
    The reference slices each from a random place of a reusable random text; here
    they are consecutive slices of that text from a random place (one copy, the
    same letters' distribution)."""
    missing = np.maximum(average - np.asarray(current, dtype=np.int64), 0)
    delta = np.floor(missing * 0.2 + 0.5).astype(np.int64)
    spread = np.floor(rng.random(len(missing)) * (2 * delta)).astype(np.int64)
    sizes = missing - delta + spread
    rotated = np.roll(text, -int(rng.integers(0, len(text))))
    return from_codes(np.resize(rotated, int(sizes.sum())), sizes)


def choice(rng: np.random.Generator, values: Sequence[str], n: int) -> pa.Array:
    """``n`` values drawn uniformly from ``values``."""
    return pc.take(pa.array(values, pa.string()), pa.array(rng.integers(0, len(values), n)))


def join(*parts, separator: str = "") -> pa.Array:
    """Element-wise concatenation of arrays and scalar strings."""
    return pc.binary_join_element_wise(*parts, separator)


def lengths(array: pa.Array) -> np.ndarray:
    """The byte lengths of the strings of ``array`` (ASCII here: their characters)."""
    return pc.binary_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
