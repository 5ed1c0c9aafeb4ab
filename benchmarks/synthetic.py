"""Synthetic attribute values for history rows, used by benchmarks and tests that write history
directly (without the event generator): plausible types and ranges, nothing more."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SURFACES = ("feed", "search", "profile", "explore")


def column_values(kind: str, n: int, rng: np.random.Generator, max_length: int | None = None) -> pa.Array:
    """`n` random values of a declared column type."""
    if kind == "string":
        values = rng.choice(SURFACES, n).tolist()
        return pa.array([v[:max_length] for v in values] if max_length else values, pa.string())
    if kind == "bool":
        return pa.array(rng.random(n) < 0.3)
    if kind.startswith("float"):
        return pa.array(rng.random(n).astype(kind))
    high = {"int8": 100, "int16": 1000}.get(kind, 50_000)
    return pa.array(rng.integers(0, high, n).astype(kind))
