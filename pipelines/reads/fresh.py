"""Fresh reads: a user's published history plus what has landed since, as one sequence.

Published history covers every record up to the frontier (highest LSN per source partition recorded
by the last window publication). Landing rows above the frontier belong to windows not published
yet; they are aggregated on the fly by the same definition compaction uses, per window, so a fresh
read shows the rows that window will publish if nothing else arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb_aggregate import aggregate_window_local
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, is_delta_table
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
    reader: HistoryReader, config: Config, paths: LandingPaths, user_id: int, selection: Selection | None = None
) -> pa.Table:
    """Published history plus open windows' landing rows above the frontier, in sequence order."""
    selection = selection or Selection()
    reader.check(selection)
    wanted = list(dict.fromkeys(selection.columns or reader.columns))
    # Top-K and order apply to the merged sequence, so the published part is read whole (with the keys).
    keyed = tuple(dict.fromkeys([*wanted, *SEQUENCE_ORDER]))
    published = reader.read_user(user_id, selection=replace(selection, columns=keyed, top_k=None, newest_first=False))
    events = unpublished_events(config, paths, user_id, published_frontier(reader.table))
    parts = [published]
    for window in sorted(set(events["window_id"].to_pylist())):
        window_events = events.filter(pa.compute.equal(events["window_id"], window))
        rows = aggregate_window_local(config, window_events)
        parts.append(rows.filter(row_filter(rows, int(user_id), selection)).select(list(keyed)))
    return finish(parts, wanted, selection, reader.arrow_schema())
