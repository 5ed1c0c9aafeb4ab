"""A forget that commits inside another job's gap between its read and its commit: the job drops the
forgotten users' rows or plans again, so none comes back."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from pipelines.compaction import history_tables
from pipelines.duckdb_compaction import compact_batch_duckdb
from pipelines.faults import run_at
from pipelines.forget import forget_users, tables_with_users, user_rows
from tests.test_publication_races import closed_unpublished, deliver, new_lake

pytestmark = pytest.mark.spark  # forget removes the landing tier's rows on Spark


def _rows_everywhere(config, users):
    history, _ = history_tables(config)
    return {t.name()[-1]: user_rows(t, users) for t in [history.refresh(), *tables_with_users(config)]}


def test_repro_compaction_brings_forgotten_rows_back(spark, lake_config):
    lake = new_lake(lake_config, max_runs=10)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    for window in windows[:2]:
        compact_batch_duckdb(lake.config, lake.paths, [window])
    history, detail = history_tables(lake.config)
    published = set(pc.unique(history.refresh().scan(selected_fields=("user_id",)).to_arrow()["user_id"]).to_pylist())
    from seqlake.duckdb_session import connect

    with connect(extensions=("delta",)) as con:
        later = con.execute(
            f"SELECT DISTINCT user_id FROM delta_scan(?) WHERE window_id IN ({','.join(map(str, windows[2:]))})",
            [lake.paths.events.removeprefix("file://")],
        ).fetchall()
    users = sorted(published & {u for (u,) in later})[:2]
    assert len(users) == 2
    with run_at("after_detail", lambda: forget_users(lake.config, users, spark=spark, paths=lake.paths)):
        compact_batch_duckdb(lake.config, lake.paths, windows[2:])
    assert _rows_everywhere(lake.config, users) == {name: 0 for name in _rows_everywhere(lake.config, users)}
