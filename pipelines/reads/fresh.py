"""Fresh reads: a user's published history plus what has landed since, as one sequence.

Published history covers every record up to the frontier (highest LSN per source partition recorded
by the last window publication). Landing rows above the frontier belong to windows not published
yet; they are aggregated on the fly by the same definition compaction uses, per window, so a fresh
read shows the rows that window will publish if nothing else arrives. With `end`, no row holds an
event from `end` on: the published part is a bounded read (`seqlake.pipelines.reads.bounded`), and
only landing rows with event_ts < end are aggregated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, is_delta_table
from seqlake.pipelines.reads.bounded import WITHHELD_KEY, bounded_read, lake_detail
from seqlake.pipelines.training.rebuild.gather import WindowDetail
from seqlake.tableformat.frontier import Frontier
from seqlake.tableformat.io import engine_location
from seqlake.tableformat.reader import SEQUENCE_ORDER, HistoryReader, Selection, finish, row_filter
from seqlake.tableformat.registry import published_frontier


def unpublished_events(config: Config, paths: LandingPaths, user_id: int, above: Mapping[int, int]) -> pa.Table:
    """The user's landing rows whose LSN is above the frontier of their source partition."""
    if not is_delta_table(paths.events):
        return landing_schema(config).empty_table()  # nothing has landed yet
    published = Frontier(above).sql("e.source_partition", "e.lsn")
    with lake_cursor() as con:
        rows = con.execute(
            f"SELECT e.* FROM delta_scan(?) AS e WHERE e.user_id = ? AND NOT ({published})",
            [engine_location(paths.events), int(user_id)],
        ).to_arrow_table()
    return rows.select(landing_schema(config).names).cast(landing_schema(config))


def fresh_history(
    reader: HistoryReader,
    config: Config,
    paths: LandingPaths,
    user_id: int,
    selection: Selection | None = None,
    detail: Callable[[], WindowDetail] | None = None,
) -> pa.Table:
    """Published history plus open windows' landing rows above the frontier, in sequence order.
    With `selection.end`, published rows that merged events from `end` on are rebuilt from `detail`
    (default: the warehouse's detail table) or withheld; `withheld_rows(result)` counts those."""
    selection = selection or Selection()
    reader.check(selection)
    wanted = list(dict.fromkeys(selection.columns or reader.columns))
    # Top-K and order apply to the merged sequence, so the published part is read whole (with the keys).
    keyed = tuple(dict.fromkeys([*wanted, *SEQUENCE_ORDER]))
    whole = replace(selection, columns=keyed, top_k=None, newest_first=False)
    withheld = 0
    if selection.end is None:
        published = reader.read_user(user_id, selection=whole)
    else:
        found = bounded_read(config, reader, [user_id], whole, detail or lake_detail(config, reader))
        published, withheld = found.rows[int(user_id)], found.total_withheld
    events = unpublished_events(config, paths, user_id, published_frontier(reader.table))
    if selection.end is not None:  # an open window's row holds only its events before `end`
        events = events.filter(pa.compute.less(events["event_ts"], pa.scalar(selection.end, events["event_ts"].type)))
    parts = [published]
    for window in sorted(set(events["window_id"].to_pylist())):
        window_events = events.filter(pa.compute.equal(events["window_id"], window))
        rows = aggregate_window_local(config, window_events)
        parts.append(rows.filter(row_filter(rows, int(user_id), selection)).select(list(keyed)))
    result = finish(parts, wanted, selection, reader.arrow_schema())
    if withheld:
        result = result.replace_schema_metadata(
            {**(result.schema.metadata or {}), WITHHELD_KEY: str(withheld).encode()}
        )
    return result
