"""Benchmark: import, ingest and compact of a Taobao-shaped event file on each engine, beside the floor.

The data is a generated CSV shaped like Taobao's UserBehavior file (user, item, category, behaviour,
time in seconds): about 100 events per user on average with Zipf-distributed users, a catalog of 0.4
items per event with Zipf popularity, wide hashed user and item ids, behaviours pv/cart/fav/buy in
Taobao's proportions, event times in bursty sessions over 9 days (216 hourly windows).

Each engine gets a warehouse of its own, and each step runs as its own `seqlake` process, so its wall
seconds and peak RSS are that step's alone: `import` (one mapping, one raw commit), `ingest` and
`compact --end-of-stream` on the engine, then `fsck`. The floor is the same work done by DuckDB in one
statement, in a process of its own: read the CSV, drop exact duplicates, group by (user, item, hourly
window) with the same merge operators, order by the key and write zstd Parquet. Every engine's
published history must hold exactly the floor's groups and merged values (checked). Times are wall
clock on a possibly shared machine: compare the ratios, which one run measures side by side.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import yaml

from benchmarks.shapes import bursty_offsets, wide_ids, zipf_weights
from seqlake.core.config import Config

SCALES = {"small": 100_000, "medium": 1_000_000, "large": 10_000_000}
ENGINES = ("duckdb", "spark")
STEPS = ("import", "ingest", "compact", "fsck")
EVENTS_PER_USER = 100
ITEMS_PER_EVENT = 0.4
CATEGORIES = 9_439
DAYS = 9
START_S = 1_511_539_200  # 2017-11-25T00:00:00Z, the first day of Taobao's file
# Taobao's shares of page views, carts, favourites and purchases, and the action flags they map to.
BEHAVIOURS = {"pv": (0.895, 1), "cart": (0.055, 64), "fav": (0.029, 2), "buy": (0.021, 128)}
WRITE_ROWS = 1_000_000  # CSV rows per write: the generator's own memory stays bounded by the scale

MAPPING = {
    "format": "csv",
    "user": "user_id",
    "item": "item_id",
    "time": "ts",
    "time_unit": "s",
    "feature_group": "engagement",
    "action": "behavior",
    "action_flags": {name: flag for name, (_, flag) in BEHAVIOURS.items()},
    "unknown_action": "error",
    "columns": {"category_id": "category_id"},
}


@dataclass
class StepRun:
    step: str
    seconds: float
    peak_rss_mib: float
    events_per_second: float


@dataclass
class EngineRun:
    engine: str
    steps: list[StepRun] = field(default_factory=list)
    history_rows: int = 0
    matches_floor: bool = False
    differences: int = 0  # groups in one of history and the floor but not in the other

    def seconds(self, *steps: str) -> float:
        return sum(s.seconds for s in self.steps if s.step in steps)


@dataclass
class ScaleRun:
    scale: str
    events: int
    users: int
    items: int
    csv_mib: float
    floor_seconds: float = 0.0
    floor_peak_rss_mib: float = 0.0
    floor_groups: int = 0
    engines: list[EngineRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(run.matches_floor for run in self.engines)

    def engine(self, name: str) -> EngineRun | None:
        return next((run for run in self.engines if run.engine == name), None)


@dataclass
class PipelineBench:
    runs: list[ScaleRun]

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs)

    def to_dict(self) -> dict:
        return asdict(self)


# -- data ---------------------------------------------------------------------------------------------


def write_taobao_csv(path: Path, events: int, seed: int) -> tuple[int, int]:
    """Write the Taobao-shaped file of `events` rows, in time order as a log holds them; (users, items)."""
    rng = np.random.default_rng(seed)
    users = max(events // EVENTS_PER_USER, 1)
    items = max(int(events * ITEMS_PER_EVENT), 1)
    per_user = np.bincount(rng.choice(users, events, p=zipf_weights(users, 1.1)), minlength=users)
    per_user = per_user[per_user > 0]
    offsets_us = bursty_offsets(per_user, rng)
    # A user's sessions are squeezed into the 9 days when they run past them (the heaviest users).
    ends = np.cumsum(per_user) - 1
    span_us = DAYS * 86_400 * 1_000_000 - 1
    last = np.repeat(offsets_us[ends], per_user)
    start = np.repeat(rng.integers(0, span_us // 2, len(per_user)), per_user)
    fits = last + start <= span_us
    offsets_us = np.where(fits, offsets_us + start, (offsets_us * (span_us / np.maximum(last, 1))).astype(np.int64))
    ts = START_S + offsets_us // 1_000_000
    user_keys = np.repeat(np.arange(len(per_user)), per_user)
    item_keys = rng.choice(items, events, p=zipf_weights(items, 1.05))
    names = np.array(list(BEHAVIOURS))
    behaviour = names[rng.choice(len(names), events, p=[share for share, _ in BEHAVIOURS.values()])]
    order = np.argsort(ts, kind="stable")
    schema = pa.schema(
        [("user_id", pa.int64()), ("item_id", pa.int64()), ("category_id", pa.int32()), ("behavior", pa.string())]
        + [("ts", pa.int64())]
    )
    with pcsv.CSVWriter(path, schema) as writer:
        for begin in range(0, events, WRITE_ROWS):
            rows = order[begin : begin + WRITE_ROWS]
            writer.write_table(
                pa.table(
                    {
                        "user_id": wide_ids(user_keys[rows]),
                        "item_id": wide_ids(item_keys[rows] + (1 << 40)),
                        "category_id": (item_keys[rows] % CATEGORIES).astype(np.int32),
                        "behavior": behaviour[rows],
                        "ts": ts[rows],
                    },
                    schema=schema,
                )
            )
    return len(per_user), items


# -- the floor ------------------------------------------------------------------------------------------


def floor_sql(csv: Path, output: Path, window_seconds: int) -> str:
    """One DuckDB statement doing compaction's work on the file: the floor every step is held to."""
    flags = ", ".join(f"('{name}', {flag})" for name, (_, flag) in BEHAVIOURS.items())
    return f"""COPY (
      SELECT user_id, item_id, ts // {window_seconds} AS window_id, bit_or(flag) AS action_flags,
        arg_max(category_id, ts) AS category_id, count(*) AS event_count, min(ts) * 1000 AS first_ms
      FROM (SELECT DISTINCT * FROM read_csv('{csv}', header = true,
              columns = {{'user_id': 'BIGINT', 'item_id': 'BIGINT', 'category_id': 'INTEGER',
                          'behavior': 'VARCHAR', 'ts': 'BIGINT'}}))
      JOIN (VALUES {flags}) AS behaviours(behavior, flag) USING (behavior)
      GROUP BY ALL ORDER BY user_id, first_ms, item_id
    ) TO '{output}' (FORMAT parquet, COMPRESSION zstd)"""


_FLOOR_SCRIPT = "import duckdb, sys; duckdb.connect().execute(sys.argv[1])"


# -- processes ------------------------------------------------------------------------------------------


# Starts a step and reports its peak RSS. On Linux a child's peak RSS starts at its parent's RSS when it
# forks (the high-water mark survives exec), so the bench, which grows while it checks history, starts
# every step from this small process instead.
_LAUNCHER = """
import os, subprocess, sys
process = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def run_process(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run `args` to completion; its (wall seconds, peak RSS in MiB, of the process and the children
    it waited for: a Spark driver's JVM is not among them)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rusage") as outcome:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, outcome.name, *args], stderr=subprocess.PIPE, env=env, check=False
        )
        seconds = time.monotonic() - started
        code, max_rss_kib = (int(part) for part in (outcome.read().split() or ["1", "0"]))
    if done.returncode != 0 or code != 0:
        error = done.stderr.decode()[-4000:]
        raise RuntimeError(f"`{' '.join(args[1:4])}` failed (exit {code}):\n{error}")
    return seconds, max_rss_kib / 1024  # Linux: KiB


# -- the run ------------------------------------------------------------------------------------------


def _engine_config(config: Config, warehouse: Path) -> dict:
    data = config.model_dump(mode="json")
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    return data


def _history_difference(config_file: Path, floor: Path) -> tuple[int, int]:
    """(history rows, groups in exactly one of history and the floor), over the compared columns."""
    from seqlake.core.config import load_config
    from seqlake.engines.duckdb_session import connect, sql_literal
    from seqlake.pipelines.compaction.plan import history_tables

    history, _ = history_tables(load_config(config_file))
    columns = ["user_id", "item_id", "window_id", "action_flags", "category_id", "event_count"]
    rows = history.scan(selected_fields=tuple(columns)).to_arrow()
    with connect() as db:
        db.register("history_rows", rows)
        chosen = ", ".join(columns)
        db.sql(f"CREATE VIEW floor_rows AS SELECT {chosen} FROM read_parquet({sql_literal(str(floor))})")
        different = db.sql(
            f"""SELECT count(*) FROM (
              (SELECT {chosen} FROM history_rows EXCEPT ALL SELECT * FROM floor_rows)
              UNION ALL
              (SELECT * FROM floor_rows EXCEPT ALL SELECT {chosen} FROM history_rows))"""
        ).fetchone()
    return rows.num_rows, int(different[0]) if different else 0


def run_pipeline_bench(
    config: Config,
    scales: tuple[str, ...],
    engines: tuple[str, ...],
    seed: int,
    events: int | None = None,
    work: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> PipelineBench:
    """Each scale (smallest first; `events` overrides the count of a single scale) on each engine."""
    ordered = sorted(scales, key=SCALES.__getitem__)
    counts = [events] if events and len(ordered) == 1 else [SCALES[s] for s in ordered]
    runs = [_run_scale(config, s, n, engines, seed, work, log) for s, n in zip(ordered, counts, strict=True)]
    return PipelineBench(runs)


def _run_scale(
    config: Config,
    scale: str,
    count: int,
    engines: tuple[str, ...],
    seed: int,
    work: Path | None,
    log: Callable[[str], None],
) -> ScaleRun:
    with tempfile.TemporaryDirectory(prefix="seqlake-bench-pipeline-", dir=work) as folder:
        root = Path(folder)
        csv = root / "user_behavior.csv"
        log(f"{scale}: writing {count:,} Taobao-shaped events")
        users, items = write_taobao_csv(csv, count, seed)
        bench = ScaleRun(scale, count, users, items, round(csv.stat().st_size / 2**20, 1))
        mapping = root / "taobao.yaml"
        mapping.write_text(yaml.safe_dump(MAPPING, sort_keys=False))

        log(f"{scale}: the floor, one DuckDB statement")
        floor = root / "floor.parquet"
        statement = floor_sql(csv, floor, config.layout.window_seconds)
        bench.floor_seconds, bench.floor_peak_rss_mib = run_process([sys.executable, "-c", _FLOOR_SCRIPT, statement])
        bench.floor_seconds = round(bench.floor_seconds, 2)
        bench.floor_groups = pq.read_metadata(floor).num_rows

        seqlake = [sys.executable, "-m", "seqlake"]
        for engine in engines:
            run = EngineRun(engine)
            config_file = root / f"{engine}.yaml"
            config_file.write_text(
                yaml.safe_dump(_engine_config(config, root / f"warehouse_{engine}"), sort_keys=False)
            )
            commands = {
                "import": ["import", "--mapping", str(mapping), "--input", str(csv)],
                "ingest": ["ingest", "--engine", engine],
                "compact": ["compact", "--end-of-stream", "--engine", engine],
                "fsck": ["fsck"],
            }
            env = {k: v for k, v in os.environ.items() if k not in ("SEQLAKE_WAREHOUSE", "SEQLAKE_CATALOG_URI")}
            for step in STEPS:
                log(f"{scale}, {engine}: {step}")
                seconds, rss = run_process([*seqlake, *commands[step], "--config", str(config_file)], env)
                run.steps.append(StepRun(step, round(seconds, 2), round(rss, 1), round(count / seconds)))
            log(f"{scale}, {engine}: checking history against the floor")
            run.history_rows, run.differences = _history_difference(config_file, floor)
            run.matches_floor = run.differences == 0 and run.history_rows == bench.floor_groups
            bench.engines.append(run)
    return bench


# -- the report ---------------------------------------------------------------------------------------


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.1f}x" if base > 0 else "n/a"


def _scale_table(bench: ScaleRun) -> list[str]:
    lines = [
        f"--scale {bench.scale}: {bench.events:,} Taobao-shaped events ({bench.csv_mib} MiB CSV), "
        f"{bench.users:,} users, {bench.items:,} items; floor (one DuckDB statement) {bench.floor_seconds:.2f} s, "
        f"{bench.floor_peak_rss_mib:,.0f} MiB peak, {bench.floor_groups:,} groups",
        "",
        "| engine | step | seconds | events/s | vs floor | peak RSS, MiB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for run in bench.engines:
        for step in run.steps:
            lines.append(
                f"| {run.engine} | {step.step} | {step.seconds:.2f} | {step.events_per_second:,.0f} | "
                f"{_ratio(step.seconds, bench.floor_seconds)} | {step.peak_rss_mib:,.0f} |"
            )
        total = run.seconds("import", "ingest", "compact")
        lines.append(
            f"| {run.engine} | import+ingest+compact | {total:.2f} | | {_ratio(total, bench.floor_seconds)} | |"
        )
    lines.append("")
    duckdb, spark = bench.engine("duckdb"), bench.engine("spark")
    if duckdb and spark:
        for name in ("ingest", "compact"):
            lines.append(f"spark / duckdb, {name}: {_ratio(spark.seconds(name), duckdb.seconds(name))} (target <= 2x)")
    for run in bench.engines:
        verdict = "the floor's groups and merged values" if run.matches_floor else f"{run.differences:,} groups differ"
        lines.append(f"{run.engine}: history holds {run.history_rows:,} rows: {verdict}")
    return lines


def _growth(smaller: ScaleRun, larger: ScaleRun) -> list[str]:
    """Per engine and step, how seconds and peak RSS grew from one scale to the next."""
    factor = larger.events / smaller.events
    lines = [f"growth from {smaller.events:,} to {larger.events:,} events ({factor:.0f}x the events):"]
    for run in larger.engines:
        before = smaller.engine(run.engine)
        if before is None:
            continue
        for step, then in zip(run.steps, before.steps, strict=True):
            lines.append(
                f"  {run.engine} {step.step}: time {_ratio(step.seconds, then.seconds)}, "
                f"peak RSS {_ratio(step.peak_rss_mib, then.peak_rss_mib)}"
            )
    return lines


def format_report(bench: PipelineBench) -> str:
    lines = ["bench-pipeline: import, ingest, compact and fsck, each step its own process, beside the floor", ""]
    for run in bench.runs:
        lines += [*_scale_table(run), ""]
    for smaller, larger in zip(bench.runs, bench.runs[1:], strict=False):
        lines += [*_growth(smaller, larger), ""]
    lines.append("RSS: each step's process and the children it waited for (a Spark driver's JVM is not counted)")
    return "\n".join(lines)


def plot(bench: PipelineBench, directory: Path) -> list[Path]:
    """A PNG of each step's seconds against the number of events, per engine, beside the floor (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline_seconds.png"
    figure, axes = plt.subplots(figsize=(7, 4.5))
    counts = [run.events for run in bench.runs]
    engines = dict.fromkeys(e.engine for run in bench.runs for e in run.engines)
    for engine in engines:
        for step in STEPS[:3]:
            runs = [r.engine(engine) for r in bench.runs]
            seconds = [run.seconds(step) if run else float("nan") for run in runs]
            axes.plot(counts, seconds, marker="o", label=f"{engine} {step}")
    axes.plot(counts, [run.floor_seconds for run in bench.runs], "k--", marker="s", label="floor")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("events")
    axes.set_ylabel("seconds")
    axes.set_title("seconds per step against events (log-log)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return [path]
