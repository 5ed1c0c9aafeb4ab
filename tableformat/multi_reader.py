"""Read many users' histories at once: one plan from the lookup index, then one read per file.

`histories(reader, user_ids, selection)` returns exactly what `reader.read_user(u, selection=selection)`
returns for each user (same rows, order, columns and types), with less work than a loop over users:

- plan once from the reader's per-snapshot lookup index (`tableformat/lookup_index.py`): each user
  goes to the files whose bucket partition and `user_id` bounds can hold it, and to its segments
  there (row-group bounds, the selection's feature groups, times, LSNs and Top-K);
- per file, the union of the users' row groups is read for all of them in ONE `read_row_groups` call,
  pre-buffered, so adjacent column chunks (those of adjacent row groups) arrive in one contiguous
  read (through the reader's `read_groups`, so `CachedHistoryReader` serves them from its cache);
- each user's rows are slices of that read, put in sequence order as `read_user` does;
- files are read in parallel.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
from pyiceberg.table import Table

from seqlake.tableformat.lookup_index import FileIndex, FilePlan
from seqlake.tableformat.reader import HistoryReader, Selection, scan_condition

WHOLE = Selection()  # every row and column of a history

__all__ = ["WHOLE", "FileIndex", "FilePlan", "histories", "plan_files"]


def plan_files(table: Table, user_ids: Sequence[int], selection: Selection = WHOLE) -> list[FilePlan]:
    """One Iceberg scan for all users (`In("user_id", ids)` and the selection's bounds), then each user
    to the files whose bucket and user_id bounds can hold it. Plan order, as `read_user` reads files."""
    ids = list(dict.fromkeys(int(u) for u in user_ids))
    if not ids:
        return []
    return FileIndex(table, scan_condition(selection, ids)).plans(ids)


def histories(
    reader: HistoryReader, user_ids: Iterable[int], selection: Selection = WHOLE, max_workers: int = 4
) -> dict[int, pa.Table]:
    """Every user's selected history, as `reader.read_user(u, selection=selection)` returns it, keyed by
    user id in the order first given; a user without rows maps to an empty table."""
    return reader.read_users(user_ids, selection, max_workers)
