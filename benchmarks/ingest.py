"""Ingest cost does not grow with a user's history (invariant 1, no read-before-write), measured.

Two setups in one warehouse (one catalog namespace each), identical in shape:

  A  the batch's users have no prior events; the same volume of prior data (landing rows and
     published history runs) belongs to other users, so both setups hold tables of the same size;
  B  the batch's users already have `prior_events` events each: `landing_prior` landing rows (an
     open window, ingested through the real path) and the rest in published sorted runs (written
     with seqlake's own file writer and committed to the history table).

Then the identical raw batch (same payloads; LSNs moved forward on every repeat) is appended to both
raw source tables as one new snapshot and ingested through the real path (`ingest_source`) into each,
interleaved in alternating order, `repeats` times. Reported: median ingest times and their ratio B/A
(the target is <= 1.2), the bytes each ingest wrote to landing (equal), whether both landed identical
rows, and every file access to history and to the prior landing files during ingest (none), observed
by the kernel (inotify) for every process, the JVM and its Python workers included. A positive control
(reading one history file while watching) shows the watch sees reads at all.
Times are wall clock on a possibly shared machine: compare the ratio, never the absolute seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from benchmarks.synthetic import column_values, pick_groups, publish_synthetic_run, synthetic_rows
from seqlake.core.config import Config, GeneratorSpec
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.windows import window_of, window_start_ms
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.demo.generator import USER_ID_BASE, EventGenerator, epoch_ms
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.registry import create_history_table

RAW = "raw_events"
HISTORY = "history"
TARGET_RATIO = 1.2
OTHER_USERS_OFFSET = 1_000_000  # setup A's prior data belongs to these users (same source partitions)
LSN_STEP = 1_000_000_000  # each repeat's batch arrives this far after the previous one, per partition


# -- file access watch (Linux inotify, through libc) ------------------------------------------------

IN_ACCESS, IN_MODIFY, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x1, 0x2, 0x8, 0x10, 0x20
IN_Q_OVERFLOW, IN_ISDIR = 0x4000, 0x40000000
_WATCH_MASK = IN_ACCESS | IN_MODIFY | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_OPEN
_EVENT = struct.Struct("iIII")


@dataclass
class Accesses:
    """File system events seen under the watched folders."""

    opens: int = 0  # files opened (for reading or writing)
    reads: int = 0  # read() calls on files
    writes: int = 0  # write() calls on files
    listings: int = 0  # watched folders opened (listed)
    files: set[str] = field(default_factory=set)  # the files touched
    listed: set[str] = field(default_factory=set)  # the folders listed

    @property
    def total(self) -> int:
        return self.opens + self.reads + self.writes + self.listings


class FileAccessWatch:
    """Every open, read, write and listing of the files directly inside `folders`, by any process."""

    def __init__(self, folders: list[Path]) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            raise OSError(errno.ENOSYS, "inotify is not available on this platform")
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._folders: dict[int, Path] = {}
        for folder in folders:
            wd = libc.inotify_add_watch(self._fd, str(folder).encode(), _WATCH_MASK)
            if wd < 0:
                os.close(self._fd)
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder} failed")
            self._folders[wd] = folder

    def drain(self) -> Accesses:
        """The events since the last drain."""
        seen = Accesses()
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return seen
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0").decode()
                offset += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    raise RuntimeError("inotify queue overflowed: accesses were lost")
                if mask & IN_ISDIR or not name:
                    # A watched folder opened: listed. (A subfolder opened shows up on its parent's
                    # watch too; it counts once, on its own watch if it is watched.)
                    if mask & IN_OPEN and not name:
                        seen.listings += 1
                        seen.listed.add(str(self._folders.get(wd, Path("?"))))
                    continue
                seen.opens += bool(mask & IN_OPEN)
                seen.reads += bool(mask & IN_ACCESS)
                seen.writes += bool(mask & IN_MODIFY)
                seen.files.add(str(self._folders.get(wd, Path("?")) / name))

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> FileAccessWatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the two setups ----------------------------------------------------------------------------------


@dataclass
class Side:
    name: str  # "A" or "B"
    config: Config  # the run's configuration in this side's namespace
    paths: LandingPaths
    prior_users: np.ndarray  # whose prior events this side holds
    history_rows: int = 0
    history_files: int = 0
    history_bytes: int = 0
    landing_prior_rows: int = 0
    seconds: list[float] = field(default_factory=list)
    landed_rows: list[int] = field(default_factory=list)
    landing_bytes: list[int] = field(default_factory=list)
    landing_files: list[int] = field(default_factory=list)
    checksums: list[str] = field(default_factory=list)
    history_access: Accesses = field(default_factory=Accesses)
    prior_landing_access: Accesses = field(default_factory=Accesses)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def side_config(config: Config, namespace: str) -> Config:
    return config.model_copy(update={"warehouse": config.warehouse.model_copy(update={"namespace": namespace})})


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _reset(side: Side) -> None:
    catalog = open_catalog(side.config)
    for name in (RAW, HISTORY):
        identifier = table_identifier(side.config, name)
        if catalog.table_exists(identifier):
            location = catalog.load_table(identifier).location()
            catalog.purge_table(identifier)
            shutil.rmtree(_local(location), ignore_errors=True)
    shutil.rmtree(_local(side.paths.events).parent, ignore_errors=True)


def _generated(config: Config, users: int, events: int, start, seed: int, clean: bool) -> pa.Table:
    """Raw records of `users` users with exactly `events` valid events each, in one arrival window."""
    spec = GeneratorSpec.model_validate(
        {
            **config.generator.model_dump(),
            "seed": seed,
            "users": users,
            "heavy_users": 0,
            "min_events": events,
            "max_events": events,
            "windows": 1,
            "start_ts": start,
            **({"duplicate_share": 0.0, "malformed_share": 0.0, "late_share": 0.0} if clean else {}),
        }
    )
    return pa.Table.from_batches(list(EventGenerator(config, spec).batches()))


def _move_users(records: pa.Table, offset: int) -> pa.Table:
    """The same records for users `offset` ids further (valid payloads only; source partitions kept)."""
    payloads = []
    for text in records["payload"].to_pylist():
        event = json.loads(text)
        event["user_id"] += offset
        event["event_id"] = f"{event['user_id']}-{event['event_id'].split('-', 1)[1]}"
        payloads.append(json.dumps(event, separators=(",", ":")))
    moved = records.set_column(records.schema.get_field_index("payload"), "payload", pa.array(payloads, pa.string()))
    return moved.cast(RAW_SCHEMA)


def synthetic_run(
    config: Config, users: np.ndarray, rows_per_user: int, window_id: int, seed: int, partitions: int
) -> pa.Table:
    """History rows of one published window (one event each), ordered as a sorted run is stored:
    by (bucket, user_id, feature_group, event_ts, lsn)."""
    rng = np.random.default_rng(seed)
    n = len(users) * rows_per_user
    user = np.repeat(users.astype(np.int64), rows_per_user)
    window_us = config.layout.window_seconds * 1_000_000
    # A column shared by several groups takes the first group's declaration, as the schema does.
    groups = reversed(list(config.feature_groups.values()))
    specs = {name: column for spec in groups for name, column in spec.columns.items()}
    return synthetic_rows(
        config,
        user_id=user,
        feature_group=pick_groups(config, n, rng),
        event_ts_us=window_start_ms(window_id, config.layout.window_seconds) * 1000 + rng.integers(0, window_us, n),
        lsn=window_id * 10 * len(users) * rows_per_user + np.arange(n, dtype=np.int64),  # unique, per window
        source_partition=user % partitions,
        window_id=np.full(n, window_id, np.int64),
        values=lambda name, kind, size, generator: column_values(kind, size, generator, specs[name].max_length),
        rng=rng,
    )


def _publish_history(side: Side, rows_per_user: int, runs: int, first_window: int, seed: int) -> None:
    """`rows_per_user` prior events of each prior user, as `runs` published window runs."""
    config = side.config
    table = create_history_table(open_catalog(config), table_identifier(config, HISTORY), config, replace=True)
    per_run = [rows_per_user // runs + (r < rows_per_user % runs) for r in range(runs)]
    for r, count in enumerate(per_run):
        if count == 0:
            continue
        window = first_window + r
        run_id = f"w{window}"
        data = synthetic_run(config, side.prior_users, count, window, seed + r, config.generator.source_partitions)
        files = publish_synthetic_run(table, config, data, run_id, [window, window])
        side.history_rows += data.num_rows
        side.history_files += len(files)
        side.history_bytes += sum(f.file_size for f in files)


def _history_folders(config: Config) -> list[Path]:
    """The history table's data folders. Its metadata is not watched: ingest reads the table's run
    registry (which windows are published, to give late records a home), never a user's history."""
    data = _local(open_catalog(config).load_table(table_identifier(config, HISTORY)).location()) / "data"
    return [data, *(p for p in data.rglob("*") if p.is_dir())]


def _data_folders(landing: str) -> list[Path]:
    root = _local(landing)
    return [root, *(p for p in root.rglob("*") if p.is_dir() and "_delta_log" not in p.parts)]


def _delta_version(path: str) -> int:
    log = _local(path) / "_delta_log"
    versions = [int(p.name.split(".")[0]) for p in log.glob("*.json")] if log.exists() else []
    return max(versions, default=-1)


def _added_files(path: str, after: int) -> list[dict]:
    """Add actions of the Delta commits after version `after`."""
    adds = []
    log = _local(path) / "_delta_log"
    for commit in sorted(log.glob("*.json")):
        if int(commit.name.split(".")[0]) > after:
            for line in commit.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    adds.append(action["add"])
    return adds


def _landed_rows(path: str, adds: list[dict], schema: pa.Schema) -> pa.Table:
    """The rows in the given data files, with their partition values, sorted by (partition, LSN)."""
    parts = []
    for add in adds:
        table = pq.read_table(_local(path) / add["path"].replace("%3D", "="))
        for column, value in add["partitionValues"].items():
            table = table.append_column(column, pa.array([int(value)] * table.num_rows, pa.int64()))
        parts.append(table.select(schema.names).cast(schema))
    rows = pa.concat_tables(parts) if parts else schema.empty_table()
    return rows.sort_by([("source_partition", "ascending"), ("lsn", "ascending")])


def _with_lsn_offset(batch: pa.Table, offset: int) -> pa.Table:
    index = batch.schema.get_field_index("lsn")
    return batch.set_column(index, "lsn", pc.add(batch["lsn"], pa.scalar(offset, pa.int64()))).cast(RAW_SCHEMA)


@dataclass
class IngestBench:
    sides: list[Side]
    users: int
    records: int  # raw records in the batch
    events: int  # rows each ingest landed (valid events, retransmissions included)
    prior_events: int
    control_reads: int  # reads the watch saw when one history file was read on purpose
    setup_seconds: float

    @property
    def ratio(self) -> float:
        a, b = self.sides
        return b.median / a.median

    @property
    def bytes_equal(self) -> bool:
        a, b = self.sides
        return a.landing_bytes == b.landing_bytes

    @property
    def rows_identical(self) -> bool:
        a, b = self.sides
        return a.checksums == b.checksums

    @property
    def history_untouched(self) -> bool:
        return all(s.history_access.total == 0 for s in self.sides)

    @property
    def prior_landing_untouched(self) -> bool:
        return all(s.prior_landing_access.total == 0 for s in self.sides)

    @property
    def ok(self) -> bool:
        """The deterministic checks (timing is reported, never checked)."""
        return (
            self.bytes_equal
            and self.rows_identical
            and self.history_untouched
            and self.prior_landing_untouched
            and self.control_reads > 0
        )

    def to_dict(self) -> dict:
        return {
            "users": self.users,
            "batch_records": self.records,
            "batch_events": self.events,
            "prior_events_per_user": {"A": 0, "B": self.prior_events},
            "ratio_b_over_a": round(self.ratio, 3),
            "target_ratio": TARGET_RATIO,
            "meets_target": self.ratio <= TARGET_RATIO,
            "landing_bytes_equal": self.bytes_equal,
            "landed_rows_identical": self.rows_identical,
            "history_untouched": self.history_untouched,
            "prior_landing_untouched": self.prior_landing_untouched,
            "watch_control_reads": self.control_reads,
            "setup_seconds": round(self.setup_seconds, 1),
            "sides": {
                s.name: {
                    "median_s": round(s.median, 4),
                    "seconds": [round(x, 4) for x in s.seconds],
                    "history_rows": s.history_rows,
                    "history_files": s.history_files,
                    "history_bytes": s.history_bytes,
                    "landing_prior_rows": s.landing_prior_rows,
                    "landed_rows": s.landed_rows,
                    "landing_bytes": s.landing_bytes,
                    "landing_files": s.landing_files,
                    "history_opens": s.history_access.opens,
                    "history_reads": s.history_access.reads,
                    "history_listings": s.history_access.listings,
                    "prior_landing_opens": s.prior_landing_access.opens,
                    "prior_landing_reads": s.prior_landing_access.reads,
                }
                for s in self.sides
            },
        }


def run_ingest_bench(
    spark: SparkSession,
    config: Config,
    *,
    namespace: str = "bench_ingest",
    users: int = 20,
    records_per_user: int = 1000,
    prior_events: int = 100_000,
    landing_prior: int = 1000,
    history_runs: int = 4,
    repeats: int = 5,
    warmup: int = 1,
    seed: int = 7,
    log: Callable[[str], None] | None = None,
) -> IngestBench:
    """Build both setups in `config`'s warehouse (namespaces `<namespace>_a` and `_b`, recreated),
    then time the same batch's ingest into each; see the module docstring."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,60}", namespace):
        raise ValueError(f"namespace {namespace!r} must be lowercase letters, digits and _, starting with a letter")
    if not 0 <= landing_prior <= prior_events:
        raise ValueError(f"landing_prior must be between 0 and prior_events ({prior_events}), got {landing_prior}")
    say = log or (lambda _: None)
    started = time.monotonic()
    window = timedelta(seconds=config.layout.window_seconds)
    start = config.generator.start_ts + window * (history_runs + 1)  # the batch's arrival window
    batch_users = USER_ID_BASE + np.arange(users, dtype=np.int64)
    sides = []
    for name, prior_users in (("A", batch_users + OTHER_USERS_OFFSET), ("B", batch_users)):
        ns_config = side_config(config, f"{namespace}_{name.lower()}")
        root = f"{ns_config.warehouse_uri()}/{namespace}_{name.lower()}_landing"
        side = Side(name, ns_config, LandingPaths(f"{root}/events", f"{root}/quarantine"), prior_users)
        _reset(side)
        sides.append(side)

    # The batch: identical payloads for both sides.
    batch = _generated(config, users, records_per_user, start, seed, clean=False)
    # Prior landing rows: an open window before the batch's, through the real ingest path.
    prior_landing = _generated(config, users, landing_prior, start - window, seed + 1, clean=True)
    # History windows come first, then the open window of the prior landing rows, then the batch's.
    first_window = window_of(epoch_ms(config.generator.start_ts), config.layout.window_seconds)
    for side in sides:
        say(f"setup {side.name}: {prior_events - landing_prior:,} history + {landing_prior:,} landing events per user")
        catalog = open_catalog(side.config)
        raw = catalog.create_table(table_identifier(side.config, RAW), schema=batch.schema)
        if landing_prior:
            moved = prior_landing if side.name == "B" else _move_users(prior_landing, OTHER_USERS_OFFSET)
            raw.append(moved)
            result = ingest_source(spark, side.config, RAW, side.paths)
            side.landing_prior_rows = result.landed
        _publish_history(side, prior_events - landing_prior, history_runs, first_window, seed + 2)

    # The watch, and a positive control: it must see a history file read on purpose.
    history_folders = {s.name: _history_folders(s.config) for s in sides}
    landing_folders = {s.name: _data_folders(s.paths.events) + _data_folders(s.paths.quarantine) for s in sides}
    with FileAccessWatch(history_folders["B"]) as watch:
        watch.drain()
        some_file = next(p for folder in history_folders["B"] for p in folder.glob("*.parquet"))
        pq.read_metadata(some_file)
        control_reads = watch.drain().reads
    setup_seconds = time.monotonic() - started

    schema = landing_schema(config)
    events = 0
    for r in range(warmup + repeats):
        shifted = _with_lsn_offset(batch, (r + 1) * LSN_STEP)
        for side in sides:
            open_catalog(side.config).load_table(table_identifier(side.config, RAW)).append(shifted)
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            before = _delta_version(side.paths.events)
            with (
                FileAccessWatch(history_folders[side.name]) as history_watch,
                FileAccessWatch(landing_folders[side.name]) as landing_watch,
            ):
                tick = time.perf_counter()
                result = ingest_source(spark, side.config, RAW, side.paths)
                seconds = time.perf_counter() - tick
                history_seen, landing_seen = history_watch.drain(), landing_watch.drain()
            if result.batches != 1:
                raise RuntimeError(f"side {side.name} ingested {result.batches} snapshots, expected 1")
            adds = _added_files(side.paths.events, before)
            events = result.landed
            if r < warmup:
                continue
            side.seconds.append(seconds)
            side.landed_rows.append(result.landed)
            side.landing_bytes.append(sum(a["size"] for a in adds))
            side.landing_files.append(len(adds))
            side.checksums.append(table_checksum(_landed_rows(side.paths.events, adds, schema), schema))
            for total_seen, seen in ((side.history_access, history_seen), (side.prior_landing_access, landing_seen)):
                total_seen.opens += seen.opens
                total_seen.reads += seen.reads
                total_seen.writes += seen.writes
                total_seen.listings += seen.listings
                total_seen.files |= seen.files
                total_seen.listed |= seen.listed
            say(f"repeat {r - warmup + 1}/{repeats} {side.name}: {seconds:.2f} s")
    return IngestBench(sides, users, batch.num_rows, events, prior_events, control_reads, setup_seconds)


def format_report(bench: IngestBench) -> str:
    """A markdown table of both sides, then the verdicts."""
    facts = bench.to_dict()
    rows = [
        ("prior events per user", "0", f"{bench.prior_events:,}"),
        ("prior history rows (all users)", *(f"{s.history_rows:,}" for s in bench.sides)),
        ("prior history files / MiB", *(f"{s.history_files} / {s.history_bytes / 2**20:.1f}" for s in bench.sides)),
        ("prior landing rows", *(f"{s.landing_prior_rows:,}" for s in bench.sides)),
        ("ingest median (s)", *(f"{s.median:.3f}" for s in bench.sides)),
        ("ingest runs (s)", *(" ".join(f"{x:.2f}" for x in s.seconds) for s in bench.sides)),
        ("landing bytes written / ingest", *(str(sorted(set(s.landing_bytes))) for s in bench.sides)),
        (
            "history files opened / read calls",
            *(f"{s.history_access.opens} / {s.history_access.reads}" for s in bench.sides),
        ),
        (
            "prior landing files opened / read calls",
            *(f"{s.prior_landing_access.opens} / {s.prior_landing_access.reads}" for s in bench.sides),
        ),
    ]
    lines = [
        f"batch: {bench.records:,} raw records ({bench.events:,} landed events) of {bench.users} users",
        "",
        "| | A: users without history | B: users with history |",
        "|---|---:|---:|",
        *(f"| {label} | {a} | {b} |" for label, a, b in rows),
        "",
        f"ratio B/A of median ingest time: {bench.ratio:.3f} (target <= {TARGET_RATIO}: "
        f"{'met' if facts['meets_target'] else 'NOT met'})",
        f"landing bytes equal: {bench.bytes_equal}; landed rows identical: {bench.rows_identical}",
        f"history untouched by ingest: {bench.history_untouched} "
        f"(the watch saw {bench.control_reads} read(s) of a history file read on purpose)",
        f"prior landing files untouched by ingest: {bench.prior_landing_untouched}",
    ]
    return "\n".join(lines)
