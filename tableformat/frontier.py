"""The LSN frontier: per source partition, the highest LSN visible. One type from capture to rebuild.

LSNs count per source partition (think Kafka partition and offset), so a bound on what was known is a
map, source partition -> LSN, never one integer: the same number means unrelated positions in two
partitions. `Frontier` is that map, immutable and hashable. A row of partition p with LSN l is
covered when the frontier names p and l <= frontier[p]; a partition the frontier does not name had
delivered nothing, so none of its rows is covered (LSNs are >= 0).

Stored in two places, one codec each:
- a pointer's `lsn_bound` column (training tables, a backfill's label pointers): Arrow / Iceberg
  `map<int32, int64>` (`FRONTIER_TYPE`: `frontier_column` and `repeated_frontier` write it,
  `frontiers_of` reads it back, `as_frontier_column` takes a map column DuckDB or Spark made);
- the history table's property and its publications' snapshot summaries, `seqlake.frontier`: a JSON
  object `{"partition": lsn}` (`Frontier.to_json`, `Frontier.from_json`; `published_frontier`).

What engines need is derived from those, here: the bounds of many pointers as one numpy matrix
(`bound_matrix`), a SQL predicate for DuckDB and Spark SQL (`Frontier.sql`), and the Spark condition
on each row's partition in a pointer's map (`spark_covered`). The command line writes a frontier as
`0:120,1:98` (`Frontier.parse`, `str`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from seqlake.tableformat.snapshots import sequence_number

if TYPE_CHECKING:
    from pyspark.sql import Column

FRONTIER_PROPERTY = "seqlake.frontier"  # table property and publication summary key (JSON object)
FRONTIER_TYPE = pa.map_(pa.int32(), pa.int64())  # a pointer's `lsn_bound` column
NOTHING = -1  # the bound of a partition a frontier does not name: below every LSN
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _whole(value: Any, what: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"a frontier's {what} must be an integer, got {value!r}")
    number = int(value)
    if not 0 <= number <= maximum:
        raise ValueError(f"a frontier's {what} must be an integer in [0, {maximum}], got {number}")
    return number


class Frontier(Mapping[int, int]):
    """Source partition -> highest visible LSN, in partition order: `Frontier({0: 120, 1: 98})`."""

    __slots__ = ("_bounds", "_keys", "_values")

    def __init__(self, bounds: Mapping[int, int] | Iterable[tuple[int, int]] = ()) -> None:
        pairs = bounds.items() if isinstance(bounds, Mapping) else bounds
        found: dict[int, int] = {}
        for partition, lsn in pairs:
            key = _whole(partition, "source partition", _INT32_MAX)
            value = _whole(lsn, "LSN", _INT64_MAX)
            if found.setdefault(key, value) != value:
                raise ValueError(f"a frontier names source partition {key} twice ({found[key]} and {value})")
        self._bounds = dict(sorted(found.items()))
        self._keys = np.fromiter(self._bounds, np.int64, len(self._bounds))
        self._values = np.fromiter(self._bounds.values(), np.int64, len(self._bounds))

    # -- the mapping ---------------------------------------------------------------------------

    def __getitem__(self, partition: int) -> int:
        return self._bounds[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._bounds)

    def __len__(self) -> int:
        return len(self._bounds)

    def __hash__(self) -> int:
        return hash(tuple(self._bounds.items()))

    def __repr__(self) -> str:
        return f"Frontier({self._bounds!r})"

    def __str__(self) -> str:
        return ",".join(f"{p}:{lsn}" for p, lsn in self._bounds.items())

    # -- visibility ----------------------------------------------------------------------------

    def covers(self, partition: int, lsn: int) -> bool:
        """Whether a row of `partition` with `lsn` is visible under the frontier."""
        return lsn <= self._bounds.get(partition, NOTHING)

    def covered(self, partitions: Any, lsns: Any) -> np.ndarray:
        """`covers` of many rows at once (numpy or Arrow arrays of equal length): a boolean array."""
        partition = _int64(partitions)
        lsn = _int64(lsns)
        if not len(self._keys):
            return np.zeros(len(lsn), bool)
        at = np.minimum(np.searchsorted(self._keys, partition), len(self._keys) - 1)
        bound = np.where(self._keys[at] == partition, self._values[at], NOTHING)
        return lsn <= bound

    def advanced(self, other: Mapping[int, int]) -> Frontier:
        """Per source partition, the higher of the two bounds (partitions of either)."""
        merged = dict(self._bounds)
        for partition, lsn in other.items():
            merged[int(partition)] = max(merged.get(int(partition), NOTHING), int(lsn))
        return Frontier(merged)

    def highest(self) -> int:
        """The highest bound of any partition (NOTHING for an empty frontier): no row above it is covered."""
        return int(self._values.max()) if len(self._values) else NOTHING

    def lowest(self, partitions: Iterable[int] | None) -> int:
        """The lowest bound over `partitions` (a partition not named counts as NOTHING): every row of
        those partitions at or below it is covered. `partitions` None (unknown): NOTHING."""
        if partitions is None:
            return NOTHING
        bounds = [self._bounds.get(int(p), NOTHING) for p in partitions]
        return min(bounds) if bounds else self.highest()

    # -- stored and written forms --------------------------------------------------------------

    def to_json(self) -> str:
        """The table property's and publication summaries' form: `{"0": 120, "1": 98}`."""
        return json.dumps({str(p): lsn for p, lsn in self._bounds.items()})

    @classmethod
    def from_json(cls, text: str | None) -> Frontier:
        """The frontier a `to_json` text (or None: no frontier recorded, an empty one) holds."""
        raw = json.loads(text) if text else {}
        if not isinstance(raw, dict):
            raise ValueError(f"a stored frontier is a JSON object, got {text!r}")
        return cls((int(p), int(lsn)) for p, lsn in raw.items())

    @classmethod
    def parse(cls, text: str) -> Frontier:
        """The command line's form `PARTITION:LSN,...`, e.g. `0:120,1:98`."""
        pairs = []
        for part in text.split(","):
            partition, sep, lsn = part.strip().partition(":")
            try:
                pairs.append((int(partition), int(lsn)))
            except ValueError:
                raise ValueError(f"{text!r} is not PARTITION:LSN[,PARTITION:LSN...], e.g. 0:120,1:98") from None
            if not sep:
                raise ValueError(f"{text!r} is not PARTITION:LSN[,PARTITION:LSN...], e.g. 0:120,1:98")
        return cls(pairs)

    def sql(self, partition: str = "source_partition", lsn: str = "lsn") -> str:
        """The predicate "covered" over the columns `partition` and `lsn`, in SQL that DuckDB and Spark
        both read (one conjunction per partition, so Iceberg prunes files by their LSN bounds)."""
        if not self._bounds:
            return "FALSE"
        return " OR ".join(f"({partition} = {p} AND {lsn} <= {bound})" for p, bound in self._bounds.items())


def _int64(values: Any) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        values = values.to_numpy(zero_copy_only=False)
    return np.asarray(values).astype(np.int64, copy=False)


# -- pointer columns --------------------------------------------------------------------------------


def frontier_column(frontiers: Sequence[Mapping[int, int]]) -> pa.MapArray:
    """One frontier per row as the stored pointer column (`FRONTIER_TYPE`, partitions in order)."""
    chosen = [f if isinstance(f, Frontier) else Frontier(f) for f in frontiers]
    lengths = np.fromiter((len(f) for f in chosen), np.int32, len(chosen))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    keys = np.concatenate([f._keys for f in chosen]) if chosen else np.zeros(0, np.int64)
    values = np.concatenate([f._values for f in chosen]) if chosen else np.zeros(0, np.int64)
    return _map_array(offsets, keys, values)


def repeated_frontier(frontier: Frontier, rows: int) -> pa.MapArray:
    """The same frontier on `rows` rows (a batch of captures from one view), without a Python loop."""
    offsets = np.arange(rows + 1, dtype=np.int32) * len(frontier)
    return _map_array(offsets, np.tile(frontier._keys, rows), np.tile(frontier._values, rows))


def _map_array(offsets: np.ndarray, keys: np.ndarray, values: np.ndarray) -> pa.MapArray:
    array = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys.astype(np.int32), pa.int32()), pa.array(values, pa.int64())
    )
    return array.cast(FRONTIER_TYPE)


def as_frontier_column(column: pa.Array | pa.ChunkedArray) -> pa.MapArray:
    """A map column of frontiers (from DuckDB, Spark or a file) in the stored type, a null row as
    the empty frontier."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        offsets = array.offsets.to_numpy().astype(np.int64)
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        # Entries of null rows (a null row may still span some) are dropped, by the row each belongs to.
        positions = np.arange(offsets[0], offsets[-1], dtype=np.int64)
        kept = positions[valid[np.searchsorted(offsets, positions, "right") - 1]]
        spans = np.where(valid, np.diff(offsets), 0)
        keys = array.keys.to_numpy(zero_copy_only=False).astype(np.int64)[kept]
        values = array.items.to_numpy(zero_copy_only=False).astype(np.int64)[kept]
        return _map_array(np.concatenate([[0], np.cumsum(spans)]).astype(np.int32), keys, values)
    return array if array.type == FRONTIER_TYPE else array.cast(FRONTIER_TYPE)


def frontiers_of(column: pa.Array | pa.ChunkedArray) -> list[Frontier]:
    """The frontier of each row of a pointer column (a null row: the empty frontier)."""
    return [Frontier(pairs or ()) for pairs in column.to_pylist()]


def bound_matrix(column: pa.Array | pa.ChunkedArray, partitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Many pointers' frontiers as a (pointers, known partitions + 1) int64 matrix of bounds, and the
    column of each of `partitions` in it: row p's bound for a row of partition q is
    `matrix[p, column[q]]`. The last column, NOTHING throughout, stands for partitions no pointer names."""
    bounds = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if bounds.null_count:
        bounds = as_frontier_column(bounds)
    # A map array's keys and items are its whole children; its offsets follow its slice.
    spans = bounds.offsets.to_numpy().astype(np.int64)
    keys = bounds.keys.to_numpy(zero_copy_only=False).astype(np.int64)[spans[0] : spans[-1]]
    values = bounds.items.to_numpy(zero_copy_only=False).astype(np.int64)[spans[0] : spans[-1]]
    known = np.unique(keys)
    matrix = np.full((len(bounds), len(known) + 1), NOTHING, np.int64)
    owner = np.repeat(np.arange(len(bounds)), np.diff(spans))
    matrix[owner, np.searchsorted(known, keys)] = values
    at = np.searchsorted(known, partitions)
    inside = at < len(known)
    inside[inside] = known[at[inside]] == partitions[inside]
    return matrix, np.where(inside, at, len(known))


def spark_covered(bounds: str = "lsn_bound", partition: str = "source_partition", lsn: str = "lsn") -> Column:
    """Spark: whether each row's `lsn` is covered by the frontier in its map column `bounds`, at its
    `partition` (a partition the map does not name covers nothing)."""
    from pyspark.sql import functions as F

    return F.col(lsn) <= F.coalesce(F.try_element_at(F.col(bounds), F.col(partition)), F.lit(NOTHING))


# -- the table's recorded frontier ------------------------------------------------------------------


def published_frontier(table: Table) -> Frontier:
    """The history table's frontier: per source partition, the highest LSN its publications cover.
    Tables published before the frontier became a table property keep it in their newest
    publication's snapshot summary: read there as a fallback."""
    raw = table.metadata.properties.get(FRONTIER_PROPERTY)
    if raw is None:
        for snapshot in sorted(table.snapshots(), key=sequence_number, reverse=True):
            raw = snapshot.summary.additional_properties.get(FRONTIER_PROPERTY) if snapshot.summary else None
            if raw:
                break
    return Frontier.from_json(raw)
