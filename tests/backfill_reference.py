"""The per-row backfill: the plain reference the set-based plan is checked against.

One label row at a time: its partitions' frontiers at ts from the arrival points, the open window,
then the rows its sequence holds under event-time or arrival semantics, and the leaked rows.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import Config
from seqlake.pipelines.training.sequence import Tenant, in_order, newest
from tests.reconstruction_reference import bounds_table, candidate_columns, rebuild_rows, visible_history


def frontier_at(arrivals: list[dict], ts) -> tuple[dict[int, int], int]:
    """{partition: highest LSN arrived by ts}, and the newest landing window arrived in (-1: none)."""
    bound: dict[int, int] = {}
    window = -1
    for point in arrivals:
        if point["arrival_ts"] <= ts:
            p = point["source_partition"]
            bound[p] = max(bound.get(p, point["lsn"]), point["lsn"])
            if point["window_id"] is not None:
                window = max(window, point["window_id"])
    return bound, window


def reference_backfill(
    config: Config, tenant: Tenant, as_of: str, labels: list[dict], history: pa.Table, detail: pa.Table, arrivals
) -> tuple[list[dict[str, list]], list[int]]:
    """Per label row: {seq_<column>: values} and the count of event-time rows that arrived after ts."""
    sequences, leaked = [], []
    columns = candidate_columns(tenant)
    groups = pa.array(tenant.feature_groups)
    for n, label in enumerate(labels):
        user_rows = history.filter(pc.equal(history["user_id"], label["user_id"]))
        user_rows = user_rows.filter(pc.is_in(user_rows["feature_group"], groups))
        bound, window = frontier_at(arrivals, label["ts"])
        ts = pa.scalar(label["ts"], user_rows["event_ts"].type)
        by_time = newest(in_order(user_rows.filter(pc.less(user_rows["event_ts"], ts))), tenant.max_length)
        late = [
            lsn > bound.get(p, -1)
            for lsn, p in zip(by_time["lsn"].to_pylist(), by_time["source_partition"].to_pylist(), strict=True)
        ]
        leaked.append(sum(late))
        if as_of == "event-time":
            rows = by_time.select(columns)
        else:
            pointer = {"lsn_bound": sorted(bound.items()), "open_window": window}
            rows = visible_history(user_rows, pointer).select(columns)
            one = pa.table(
                {
                    "request_id": [f"l{n}"],
                    "user_id": pa.array([label["user_id"]], pa.int64()),
                    "open_window": pa.array([window], pa.int64()),
                    "lsn_bound": pa.array([sorted(bound.items())], pa.map_(pa.int32(), pa.int64())),
                }
            )
            if detail.num_rows and bound:
                rebuilt = rebuild_rows(config, detail, bounds_table(one))
                rebuilt = rebuilt.filter(pc.is_in(rebuilt["feature_group"], groups))
                rows = pa.concat_tables([rows, rebuilt.select(columns).cast(rows.schema)])
            rows = newest(in_order(rows), tenant.max_length)
        sequences.append({f"seq_{c}": rows[c].to_pylist() for c in tenant.model_columns})
    return sequences, leaked
