"""Processing windows: fixed, epoch-aligned intervals of arrival time, `layout.window_seconds` long.

Window `w` holds the arrivals from `w * window_seconds` (inclusive) to `(w + 1) * window_seconds`
(exclusive) seconds after the epoch. `window_of` maps arrival times to their windows and
`window_start_ms` / `window_start` a window to its first instant, for Python and NumPy integers, Arrow
columns (`window_ids`) and SQL text (`window_start_sql`): every engine, tool and benchmark counts
windows by these.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # imported where used: a command's help, which loads this module, loads no engine
    import numpy as np
    import pyarrow as pa

Integers = TypeVar("Integers", int, "np.ndarray")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_of(arrival_ms: Integers, window_seconds: int) -> Integers:
    """The processing window of arrival times in epoch milliseconds (an integer or a NumPy array). Of
    a time since a stream's start: its window counted from that start."""
    return arrival_ms // (window_seconds * 1000)


def window_start_ms(window_id: Integers, window_seconds: int) -> Integers:
    """The first epoch millisecond of window `window_id` (an integer or a NumPy array): the inverse
    of `window_of`."""
    return window_id * (window_seconds * 1000)


def window_start(window_id: int, window_seconds: int) -> datetime:
    """The first instant of window `window_id`, a UTC datetime."""
    return _EPOCH + timedelta(milliseconds=window_start_ms(window_id, window_seconds))


def window_ids(arrival_ts: pa.Array | pa.ChunkedArray, window_seconds: int) -> pa.Array:
    """`window_of` of an Arrow timestamp column: the window of each arrival (int64)."""
    import pyarrow as pa

    millis = arrival_ts.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return pa.array(window_of(millis, window_seconds), pa.int64())


def window_start_sql(window_id: str, window_seconds: str) -> str:
    """`window_start` as SQL (DuckDB, a TIMESTAMP WITH TIME ZONE): `window_id` and `window_seconds`
    are SQL expressions (a column, a literal, `getvariable('window_seconds')`)."""
    return f"to_timestamp(({window_id}) * ({window_seconds}))"
