"""Write amplification and read cost of run merges over many windows, side by side: the configured
size-tiered policy against the old capacity merge (every run into one above `layout.max_runs`).

For each policy a namespace of its own (`<namespace>_<policy>`, recreated) gets a history table; each
of N windows is published as one sorted run (as a window compaction commits it) and then the DuckDB
engine's merge step runs (`merge_runs_if_needed_duckdb`, the same call `seqlake compact --engine
duckdb` makes). Reported per policy: rows rewritten by merges per row ingested, the most runs (files a
lookup may open per bucket) at any time and after the last step, and the files a lookup of sampled
users actually plans at the end. Every policy must end with every window published once and every
row once (checked).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from benchmarks.synthetic import pick_groups, synthetic_rows
from seqlake.core.config import Config
from seqlake.engines.catalog import purge_tables
from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb, write_history_run
from seqlake.pipelines.compaction.merge_policy import policy_of
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.lookup_index import FileIndex
from seqlake.tableformat.registry import RunRecord, commit_runs, live_runs
from seqlake.tableformat.schema import KEY_COLUMNS

HOUR_US = 3_600_000_000
BASE_WINDOW = 491_000  # an hour of 2026, so event times look like the generator's
TARGET_WRITE_AMPLIFICATION = 4.0
OLD_MAX_RUNS = 4  # the capacity merge's default before the tiered policy


@dataclass
class PolicyResult:
    policy: str
    windows: int
    rows_ingested: int = 0
    rows_rewritten: int = 0
    merges: int = 0
    most_runs: int = 0  # the most live runs after any step, before its merge: files per lookup, worst case
    runs_at_end: int = 0
    files_per_lookup_at_end: int = 0  # the most files a sampled user's lookup plans at the end
    bound: int = 0  # the policy's bound on files per lookup: max_runs + 1
    seconds: float = 0.0

    @property
    def write_amplification(self) -> float:
        return self.rows_rewritten / max(self.rows_ingested, 1)


@dataclass
class MergeBench:
    windows: int
    rows_per_window: int
    results: list[PolicyResult] = field(default_factory=list)
    ok: bool = True
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        for row, result in zip(data["results"], self.results, strict=True):
            row["write_amplification"] = result.write_amplification
        return data


def capacity_merge_config(config: Config, max_runs: int = OLD_MAX_RUNS) -> Config:
    """The old capacity merge (its default `max_runs` 4) as knobs of the policy: no size-ratio or
    amplification merges (their width is never reached), and a forced merge grows to every run."""
    merge = config.merge.model_copy(
        update={"size_ratio_percent": 10**9, "max_size_amplification_percent": 10**9, "min_merge_width": max_runs + 2}
    )
    layout = config.layout.model_copy(update={"max_runs": max_runs})
    return config.model_copy(update={"merge": merge, "layout": layout})


def window_rows(config: Config, window: int, rows: int, users: int, rng: np.random.Generator) -> pa.Table:
    """`rows` history rows of one processing window for `users` users, in the writer's order."""
    ts = (BASE_WINDOW + window) * HOUR_US + rng.integers(0, HOUR_US, rows)
    return synthetic_rows(
        config,
        user_id=1_000_000 + rng.integers(0, users, rows).astype(np.int64) * 7,
        feature_group=pick_groups(config, rows, rng),
        event_ts_us=ts,
        lsn=(BASE_WINDOW + window) * 10_000_000 + np.arange(rows, dtype=np.int64),
        window_id=np.full(rows, BASE_WINDOW + window, np.int64),
        rng=rng,
    )


def publish_window(history, config: Config, window: int, rows: pa.Table) -> None:
    """Commit one window's rows as run `w<window>`, as a window compaction does."""
    run_id = f"w{window}"
    files = write_history_run(history, config, run_id, rows)
    commit_runs(history, [(RunRecord(run_id, "window", [window], len(files), rows.num_rows), files)])


def _fresh(config: Config, namespace: str) -> Config:
    lake = config.model_copy(update={"warehouse": config.warehouse.model_copy(update={"namespace": namespace})})
    purge_tables(lake, (HISTORY, DETAIL))
    history_tables(lake)
    return lake


def files_per_lookup(history, user_ids: list[int]) -> int:
    """The most files the lookup planner gives any of the users."""
    counts: dict[int, int] = {}
    for plan in FileIndex(history).plans(user_ids):
        for user in plan.users:
            counts[user] = counts.get(user, 0) + 1
    return max(counts.values(), default=0)


def run_policy(
    config: Config, name: str, windows: int, rows_per_window: int, users: int, seed: int, log: Callable[[str], None]
) -> tuple[PolicyResult, list[str]]:
    history, _ = history_tables(config)
    result = PolicyResult(name, windows, bound=policy_of(config).max_runs + 1)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    for window in range(windows):
        rows = window_rows(config, window, rows_per_window, users, rng)
        publish_window(history, config, BASE_WINDOW + window, rows)
        result.rows_ingested += rows.num_rows
        result.most_runs = max(result.most_runs, len(live_runs(history.refresh())))
        merged = merge_runs_if_needed_duckdb(config)
        if merged:
            result.merges += 1
            result.rows_rewritten += live_runs(history.refresh())[merged].rows
        if (window + 1) % 25 == 0:
            log(f"{name}: {window + 1} windows, write amplification {result.write_amplification:.2f}")
    result.seconds = time.perf_counter() - started
    history.refresh()
    result.runs_at_end = len(live_runs(history))
    sample = [1_000_000 + u * 7 for u in range(0, users, max(1, users // 50))]
    result.files_per_lookup_at_end = files_per_lookup(history, sample)

    problems = []
    held = sorted(w for run in live_runs(history).values() for w in run.windows)
    if held != [BASE_WINDOW + w for w in range(windows)]:
        problems.append(f"{name}: the runs hold windows {held[:5]}..., not each of the {windows} windows once")
    keys = history.scan(selected_fields=KEY_COLUMNS).to_arrow()
    distinct = keys.group_by(list(KEY_COLUMNS)).aggregate([]).num_rows
    if keys.num_rows != result.rows_ingested or distinct != keys.num_rows:
        problems.append(f"{name}: {keys.num_rows} rows ({distinct} keys) for {result.rows_ingested} ingested")
    return result, problems


def run_merge_bench(
    config: Config,
    *,
    windows: int = 120,
    rows_per_window: int = 2_000,
    users: int = 500,
    namespace: str = "bench_merge",
    seed: int = 7,
    log: Callable[[str], None] = lambda line: None,
) -> MergeBench:
    bench = MergeBench(windows, rows_per_window)
    for name, policy_config in (("tiered", config), ("merge-all", capacity_merge_config(config))):
        lake = _fresh(policy_config, f"{namespace}_{name.replace('-', '_')}")
        result, problems = run_policy(lake, name, windows, rows_per_window, users, seed, log)
        bench.results.append(result)
        bench.problems += problems
    bench.ok = not bench.problems
    return bench


def format_report(bench: MergeBench, config: Config) -> str:
    merge = config.merge
    lines = [
        f"run merges over {bench.windows} windows of {bench.rows_per_window:,} rows (DuckDB engine); tiered policy: "
        f"max_runs {config.layout.max_runs}, size_ratio {merge.size_ratio_percent}%, "
        f"max_size_amplification {merge.max_size_amplification_percent}%, min_merge_width {merge.min_merge_width}",
        f"{'policy':>10} {'merges':>7} {'rows ingested':>14} {'rows rewritten':>15} {'write amp':>10} "
        f"{'most runs':>10} {'runs at end':>12} {'files/lookup':>13} {'bound':>6} {'seconds':>8}",
    ]
    for r in bench.results:
        lines.append(
            f"{r.policy:>10} {r.merges:>7} {r.rows_ingested:>14,} {r.rows_rewritten:>15,} "
            f"{r.write_amplification:>10.2f} {r.most_runs:>10} {r.runs_at_end:>12} {r.files_per_lookup_at_end:>13} "
            f"{r.bound:>6} {r.seconds:>8.1f}"
        )
    tiered, everything = bench.results
    verdict = "met" if tiered.write_amplification <= TARGET_WRITE_AMPLIFICATION else "not met"
    ratio = everything.write_amplification / max(tiered.write_amplification, 1e-9)
    lines.append(
        f"target write amplification <= {TARGET_WRITE_AMPLIFICATION:g} (tiered): {tiered.write_amplification:.2f} "
        f"({verdict}); merge-all / tiered: {ratio:.1f}x"
    )
    verdict = "met" if tiered.most_runs <= tiered.bound else "not met"
    lines.append(f"target files per lookup <= max_runs + 1 = {tiered.bound} (tiered): {tiered.most_runs} ({verdict})")
    lines.extend(f"PROBLEM: {p}" for p in bench.problems)
    return "\n".join(lines)
