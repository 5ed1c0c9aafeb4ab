"""Aggregation pushdown: count and first/last event time of a user's selected history, answered from
the lookup index where a segment is a whole row group holding only selected rows (the footer's row
count and `event_ts` bounds), and from the `event_ts` column alone elsewhere: no attribute column is
read and no row is materialised beyond those keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc

from seqlake.tableformat.reader import HistoryReader, Selection, read_segments

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class HistoryStats:
    count: int
    first_ts: datetime | None
    last_ts: datetime | None
    row_groups_from_statistics: int  # answered from the index alone
    row_groups_scanned: int  # event_ts read


def history_stats(reader: HistoryReader, user_id: int, selection: Selection | None = None) -> HistoryStats:
    """count(*), min(event_ts), max(event_ts) of the user's selected rows (Top-K applied)."""
    selection = selection or Selection()
    reader.check(selection)
    user = int(user_id)
    entries, found = reader.lookup_index().segments([user], selection, reader.read_groups)
    segments = found[user]
    known = segments.whole & segments.exact
    if selection.top_k is not None and (segments.length[known].sum() > selection.top_k or not known.all()):
        known[:] = False  # Top-K may cut inside a segment: the newest times themselves are needed
    count = int(segments.length[known].sum())
    first = [int(segments.ts_min[known].min())] if known.any() else []
    last = [int(segments.ts_max[known].max())] if known.any() else []
    rest = segments.take(~known)
    if len(rest):
        keys = Selection(**{**selection.__dict__, "columns": ("event_ts",), "newest_first": False})
        empty = lambda: reader.empty(["event_ts"])  # noqa: E731
        times = read_segments(reader.read_groups, entries, {user: rest}, keys, ["event_ts"], empty)[user]
        if times.num_rows:
            count += times.num_rows
            low, high = pc.min_max(times["event_ts"]).values()
            first.append(low.value)
            last.append(high.value)
    return HistoryStats(
        count,
        _time(min(first, default=None)),
        _time(max(last, default=None)),
        len(set(zip(segments.file[known].tolist(), segments.rg[known].tolist(), strict=True))),
        len(set(zip(rest.file.tolist(), rest.rg.tolist(), strict=True))),
    )


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else _EPOCH + timedelta(microseconds=micros)
