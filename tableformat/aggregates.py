"""Aggregation pushdown: count and first/last event time of a user's selected history, answered from
footer statistics where a row group holds only selected rows, and from the key columns alone
elsewhere: no attribute column is read and no row is materialised beyond those keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableformat.io import read_footer
from tableformat.reader import SEQUENCE_ORDER, HistoryReader, Selection, plan_row_groups, row_filter
from tableformat.schema import KEY_COLUMNS


@dataclass(frozen=True)
class HistoryStats:
    count: int
    first_ts: datetime | None
    last_ts: datetime | None
    row_groups_from_statistics: int  # answered from the footer alone
    row_groups_scanned: int  # key columns read


def history_stats(reader: HistoryReader, user_id: int, selection: Selection | None = None) -> HistoryStats:
    """count(*), min(event_ts), max(event_ts) of the user's selected rows (Top-K applied)."""
    selection = selection or Selection()
    reader.check(selection)
    count, first, last, from_stats, scanned = 0, [], [], 0, 0
    keys: list[pa.Table] = []  # only for Top-K, which needs the newest event times themselves
    for uri in reader.files_for_user(user_id, selection):
        with reader.fs.open_input_file(uri) as handle:
            meta = reader.footers.get(uri)
            if meta is None:
                meta = read_footer(handle)
                reader.footers.put(uri, meta)
            ts_col = meta.schema.to_arrow_schema().get_field_index("event_ts")
            plan = plan_row_groups(meta, int(user_id), selection)
            exact = [rg for rg, only in plan if only and selection.top_k is None]
            for rg in exact:
                stats = meta.row_group(rg).column(ts_col).statistics
                count += meta.row_group(rg).num_rows
                first.append(stats.min)
                last.append(stats.max)
            from_stats += len(exact)
            rest = [rg for rg, _ in plan if rg not in exact]
            if not rest:
                continue
            scanned += len(rest)
            parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=False)
            table = parquet.read_row_groups(rest, columns=list(KEY_COLUMNS))
            table = table.filter(row_filter(table, int(user_id), selection))
        if selection.top_k is not None:
            keys.append(table.select(list(SEQUENCE_ORDER)))
            continue
        if table.num_rows:
            count += table.num_rows
            low, high = pc.min_max(table["event_ts"]).values()
            first.append(low.as_py())
            last.append(high.as_py())
    if selection.top_k is not None and keys:
        newest = pa.concat_tables(keys).sort_by([(k, "ascending") for k in SEQUENCE_ORDER])
        newest = newest.slice(max(0, newest.num_rows - selection.top_k))
        count = newest.num_rows
        if count:
            first.append(newest["event_ts"][0].as_py())
            last.append(newest["event_ts"][-1].as_py())
    return HistoryStats(count, min(first, default=None), max(last, default=None), from_stats, scanned)
