"""Tiered merges on a real history table (DuckDB engine, no JVM): a merge rewrites only the newest runs,
the registry holds the exact union of their windows, and every row stays readable exactly once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.merge import BASE_WINDOW, format_report, publish_window, run_merge_bench, window_rows
from seqlake.core.config import Config
from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import files_of_runs, live_runs, published_windows
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema
from tests.conftest import make_config


def small_lake(tmp_path: Path, **merge: int) -> Config:
    config = make_config(tmp_path / "warehouse")
    layout = config.layout.model_copy(update={"bucket_count": 2, "max_runs": 4})
    knobs = config.merge.model_copy(update={"min_merge_width": 3, **merge})
    return config.model_copy(update={"layout": layout, "merge": knobs})


def content(rows: pa.Table, config: Config) -> str:
    schema = history_arrow_schema(config)
    rows = rows.select(schema.names).cast(schema).sort_by([(k, "ascending") for k in KEY_COLUMNS])
    return table_checksum(rows, schema)


def test_merges_rewrite_only_the_newest_runs_and_keep_every_row_once(tmp_path: Path) -> None:
    config = small_lake(tmp_path)
    history, _ = history_tables(config)
    rng = np.random.default_rng(3)
    published: list[pa.Table] = []
    # Windows out of order (a late window after later ones), sizes far apart: a big old run first.
    order = [0, 2, 3, 4, 1, 5, 6, 7, 8, 9, 10, 11]
    sizes = {0: 3000}
    merges: list[tuple[set[str], str]] = []
    for window in order:
        rows = window_rows(config, window, sizes.get(window, 300), 60, rng)
        published.append(rows)
        publish_window(history, config, BASE_WINDOW + window, rows)
        before = live_runs(history.refresh())
        before_files = {f.file_path for f in files_of_runs(history, set(before))}
        merged = merge_runs_if_needed_duckdb(config)
        after = live_runs(history.refresh())
        assert len(after) <= config.layout.max_runs
        if merged is None:
            assert after == before
            continue
        replaced = set(before) - set(after)
        merges.append((replaced, merged))
        # The replaced runs are the newest ones; older runs keep their very files.
        assert list(before)[: len(before) - len(replaced)] == [r for r in after if r != merged]
        kept_files = {f.file_path for f in files_of_runs(history, set(after) - {merged})}
        assert kept_files <= before_files
        assert after[merged].windows == sorted(w for r in replaced for w in before[r].windows)
        assert after[merged].rows == sum(before[r].rows for r in replaced)

    # The big first run was never rewritten by the small windows' merges; some merge took a subset.
    assert "w491000" in live_runs(history)
    assert any(len(replaced) < len(order) for replaced, _ in merges)
    assert published_windows(history) == {BASE_WINDOW + w for w in order}
    everything = pa.concat_tables(published)
    stored = history.scan().to_arrow()
    assert stored.num_rows == everything.num_rows
    assert content(stored, config) == content(everything, config)
    # A lookup merges the runs' files back into one sequence: each of a user's rows once, in order.
    user = int(everything["user_id"][0].as_py())
    mine = HistoryReader(history).read_user(user)
    expected = everything.filter(pa.compute.equal(everything["user_id"], user))
    assert mine.num_rows == expected.num_rows
    assert (
        mine.select(["event_ts", "lsn"]).to_pylist()
        == expected.sort_by([("event_ts", "ascending"), ("lsn", "ascending")]).select(["event_ts", "lsn"]).to_pylist()
    )
    fsck_table(history)


def test_merge_bench_tiered_policy_rewrites_less_than_merging_everything(tmp_path: Path, measurement) -> None:
    config = small_lake(tmp_path, min_merge_width=4)
    bench = run_merge_bench(config, windows=40, rows_per_window=200, users=80)
    assert bench.ok, bench.problems
    tiered, everything = bench.results
    assert tiered.rows_ingested == everything.rows_ingested == 40 * 200
    assert tiered.write_amplification < everything.write_amplification
    assert tiered.most_runs <= tiered.bound and tiered.files_per_lookup_at_end <= tiered.runs_at_end
    for line in format_report(bench, config).splitlines():
        measurement(f"bench-merge (40 windows): {line}")
