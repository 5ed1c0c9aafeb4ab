"""Synthetic history rows for table-format tests: realistic shapes, exact control over lengths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from benchmarks.synthetic import column_values
from seqlake.config import Config
from tableformat.bucketing import bucket_of
from tableformat.layout import LayoutPolicy
from tableformat.schema import KEY_COLUMNS, history_arrow_schema

BASE_TS_US = 1_767_571_200_000_000  # 2026-01-05T00:00:00Z


def synthetic_history(config: Config, lengths: dict[int, int], seed: int = 1) -> pa.Table:
    """History rows for users {user_id: rows}, ordered by (bucket, user, group, event_ts, lsn)."""
    rng = np.random.default_rng(seed)
    schema = history_arrow_schema(config)
    groups = list(config.feature_groups)
    parts = []
    for user, n in lengths.items():
        group = rng.choice(groups, n, p=[0.8] + [0.2 / (len(groups) - 1)] * (len(groups) - 1))
        ts = BASE_TS_US + np.cumsum(rng.integers(1_000_000, 60_000_000, n))
        lsn = np.cumsum(rng.integers(1, 5, n)) + user % 1000 * 1_000_000
        columns = {
            "user_id": pa.array(np.full(n, user, dtype=np.int64)),
            "feature_group": pa.array(group),
            "event_ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "lsn": pa.array(lsn),
            "min_lsn": pa.array(lsn - rng.integers(0, 2, n)),
            "source_partition": pa.array(np.full(n, user % 4, dtype=np.int32)),
            "event_count": pa.array(rng.integers(1, 4, n).astype(np.int32)),
            "window_id": pa.array((ts - BASE_TS_US) // 3_600_000_000),
        }
        for name, kind in config.column_types().items():
            values = column_values(kind, n, rng)
            owners = [g for g, spec in config.feature_groups.items() if name in spec.columns]
            mask = pa.array(~np.isin(group, owners))
            columns[name] = pa.compute.if_else(mask, pa.nulls(n, values.type), values)
        parts.append(pa.table(columns))
    table = pa.concat_tables(parts)
    table = table.append_column("_bucket", pa.array(bucket_of(table["user_id"], config.layout.bucket_count)))
    table = table.sort_by([("_bucket", "ascending")] + [(k, "ascending") for k in KEY_COLUMNS])
    return table.drop_columns(["_bucket"]).cast(schema)


def publish_run(table, config: Config, data: pa.Table, run_id: str, batch_rows: int = 4096, policy=None):
    """Write `data` (bucket-ordered) as sorted run `run_id` and commit it; return the written files."""
    from tableformat.layout import DEFAULT_POLICY
    from tableformat.registry import RunRecord, commit_runs, history_file_uri
    from tableformat.run_writer import write_run

    files = write_run(
        data.to_batches(max_chunksize=batch_rows),
        file_uri=lambda bucket: history_file_uri(table.location(), run_id, bucket),
        schema=history_arrow_schema(config),
        run_id=run_id,
        bucket_count=config.layout.bucket_count,
        group_order=list(config.feature_groups),
        policy=policy or DEFAULT_POLICY,
    )
    # A window run holds the window its id names; the synthetic rows' window_id need not say so.
    named = run_id[1:] if run_id.startswith("w") and run_id[1:].isdigit() else None
    windows = [int(named)] if named is not None else pa.compute.unique(data["window_id"]).to_pylist()
    record = RunRecord(run_id, "window", windows, len(files), data.num_rows)
    commit_runs(table, [(record, files)])
    return files


def history_table(config: Config, name: str = "history"):
    from seqlake.catalog import open_catalog, table_identifier
    from tableformat.registry import create_history_table

    return create_history_table(open_catalog(config), table_identifier(config, name), config, replace=True)


# Small row groups, so that selections cross dedicated, packed and split row groups.
SMALL_ROW_GROUPS = LayoutPolicy(dedicated_user_rows=1000, packed_row_group_rows=2000, max_row_group_rows=3000)
BASE = datetime.fromtimestamp(BASE_TS_US / 1e6, UTC)


def selections(columns=None, as_of_lsn=None):
    """Hypothesis strategy of reader selections over synthetic histories (event times from BASE)."""
    from hypothesis import strategies as st

    from tableformat.reader import Selection

    return st.builds(
        lambda groups, cols, start, length, lsn, top_k, newest: Selection(
            feature_groups=groups,
            columns=cols,
            start=None if start is None else BASE + timedelta(hours=start),
            end=None if start is None or length is None else BASE + timedelta(hours=start + length),
            as_of_lsn=lsn,
            top_k=top_k,
            newest_first=newest,
        ),
        st.one_of(st.none(), st.sampled_from([("engagement",), ("search", "purchase"), ("purchase",)])),
        columns if columns is not None else st.none(),
        st.one_of(st.none(), st.integers(0, 60)),
        st.one_of(st.none(), st.integers(1, 40)),
        st.one_of(st.none(), as_of_lsn if as_of_lsn is not None else st.integers(0, 3_000)),
        st.one_of(st.none(), st.integers(0, 400)),
        st.booleans(),
    )
