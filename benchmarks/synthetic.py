"""Synthetic history rows, written directly (without the event stream and compaction): the one
generator behind every benchmark and every test that needs history of a chosen shape.

A caller describes the keys of its shape (which users, how many rows each, their event times and
LSNs); `synthetic_rows` fills in the rest the same way for all of them: the feature group of each row
(`seqlake.pipelines.demo.generator.group_weights`), attribute values of the declared column types (null outside the
row's group), the bookkeeping columns, and the storage order. Lengths come from
`seqlake.pipelines.demo.generator.pareto_lengths`, the event stream's own distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.windows import window_of
from seqlake.pipelines.demo.generator import group_weights, pareto_lengths
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.layout import DEFAULT_POLICY, LayoutPolicy
from seqlake.tableformat.registry import RunRecord, commit_runs, history_file_uri
from seqlake.tableformat.run_writer import write_run
from seqlake.tableformat.schema import history_arrow_schema
from seqlake.tableformat.writer import WrittenFile

SURFACES = ("feed", "search", "profile", "explore")

__all__ = [
    "column_values",
    "history_lengths",
    "synthetic_rows",
    "increasing_per_user",
    "pick_groups",
    "publish_synthetic_run",
    "skewed_values",
]


def column_values(kind: str, n: int, rng: np.random.Generator, max_length: int | None = None) -> pa.Array:
    """`n` random values of a declared column type: plausible types and ranges, nothing more."""
    if kind == "string":
        values = rng.choice(SURFACES, n).tolist()
        return pa.array([v[:max_length] for v in values] if max_length else values, pa.string())
    if kind == "bool":
        return pa.array(rng.random(n) < 0.3)
    if kind.startswith("float"):
        return pa.array(rng.random(n).astype(kind))
    high = {"int8": 100, "int16": 1000}.get(kind, 50_000)
    return pa.array(rng.integers(0, high, n).astype(kind))


def skewed_values(name: str, kind: str, n: int, rng: np.random.Generator, items: int) -> np.ndarray:
    """`n` values of a declared column type, skewed as real ones are: a few frequent strings, Zipf
    popularity of ids (items among `items`), log-normal durations and counts."""
    if kind == "string":
        vocab = np.array([f"{name[:3]}{i}" for i in range(8)])
        weights = 1.0 / np.arange(1, 9)
        return vocab[rng.choice(8, n, p=weights / weights.sum())]
    if kind == "bool":
        return rng.random(n) < 0.3
    if kind.startswith("float"):
        return rng.random(n).astype(kind)
    if name.endswith("_id"):  # identifiers: Zipf popularity over a domain
        domain = items if name == "item_id" else 1_000_000
        return ((rng.zipf(1.3, n) - 1) % domain).astype(kind)
    if kind in ("int8", "int16"):
        return rng.integers(0, 100 if kind == "int8" else 1000, n).astype(kind)
    return np.minimum(rng.lognormal(5, 2, n), np.iinfo(np.int32).max).astype(kind)  # durations, counts


def history_lengths(
    users: int, heavy_users: int, heavy_rows: int, min_events: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    """Rows per user: Pareto lengths capped at `heavy_rows`, and `heavy_users` users (chosen at random)
    at exactly that."""
    if not 0 <= heavy_users <= users:
        raise ValueError(f"need 0 <= heavy_users <= users, got {heavy_users} and {users}")
    lengths = pareto_lengths(users, min_events, alpha, heavy_rows, rng)
    lengths[rng.choice(users, heavy_users, replace=False)] = heavy_rows
    return lengths


def increasing_per_user(lengths: np.ndarray, rng: np.random.Generator, low: int, high: int) -> np.ndarray:
    """Values that grow by `low`..`high` (exclusive) a row from the first, restarting at each user
    (users in the order of `lengths`): event-time offsets, LSNs."""
    n = int(lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    step = rng.integers(low, high, n)
    elapsed = np.cumsum(step)
    return elapsed - np.repeat(elapsed[starts] - step[starts], lengths)


def pick_groups(config: Config, n: int, rng: np.random.Generator, groups: Sequence[str] | None = None) -> np.ndarray:
    """The feature group of each of `n` rows: the first of `groups` (default: every configured group,
    in order) most often, as the event stream draws them."""
    chosen = list(groups or config.feature_groups)
    return np.array(chosen)[rng.choice(len(chosen), n, p=group_weights(len(chosen)))]


def synthetic_rows(
    config: Config,
    *,
    user_id: np.ndarray,
    feature_group: np.ndarray,
    event_ts_us: np.ndarray,
    lsn: np.ndarray,
    rng: np.random.Generator,
    min_lsn: np.ndarray | None = None,
    last_event_ts_us: np.ndarray | None = None,
    source_partition: np.ndarray | None = None,
    event_count: np.ndarray | None = None,
    window_id: np.ndarray | None = None,
    values: Callable[[str, str, int, np.random.Generator], pa.Array | np.ndarray] | None = None,
    bucketed: bool = True,
) -> pa.Table:
    """History rows with the given keys, in the history schema and in storage order: by bucket (unless
    `bucketed` is False, for one file's rows), then user, feature group, event time and LSN.

    Left out, a column takes its default: `min_lsn` the LSN and `last_event_ts` the event time
    (null for single-event rows, as compaction writes them), `source_partition`
    the user modulo the configured partitions, `event_count` 1, `window_id` the event time's window.
    Attribute values come from `values(name, kind, n, rng)` (default `column_values`) and are null
    outside the row's feature group."""
    n = len(user_id)
    draw = values or (lambda name, kind, size, generator: column_values(kind, size, generator))
    columns: dict[str, pa.Array | np.ndarray] = {
        "user_id": np.asarray(user_id, np.int64),
        "feature_group": feature_group,
        "event_ts": pa.array(event_ts_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "lsn": np.asarray(lsn, np.int64),
        "last_event_ts": _last_event_ts(event_ts_us, last_event_ts_us, event_count),
        "min_lsn": np.asarray(lsn if min_lsn is None else min_lsn, np.int64),
        "source_partition": (
            (user_id % config.generator.source_partitions) if source_partition is None else source_partition
        ).astype(np.int32),
        "event_count": np.ones(n, np.int32) if event_count is None else event_count.astype(np.int32),
        "window_id": window_of(event_ts_us // 1000, config.layout.window_seconds) if window_id is None else window_id,
    }
    for name, kind in config.column_types().items():
        owners = [g for g, spec in config.feature_groups.items() if name in spec.columns]
        drawn = draw(name, kind, n, rng)
        drawn = drawn.to_numpy(zero_copy_only=False) if isinstance(drawn, pa.Array) else drawn
        columns[name] = pa.array(
            drawn, history_arrow_schema(config).field(name).type, mask=~np.isin(feature_group, owners)
        )
    # Feature groups sort by name, as the writer's key order does.
    group_rank = np.searchsorted(sorted(set(feature_group)), feature_group)
    keys = [columns["source_partition"], columns["lsn"], event_ts_us, group_rank, user_id]
    if bucketed:
        keys.append(bucket_of(user_id, config.layout.bucket_count))
    table = pa.table({k: pa.array(v) if isinstance(v, np.ndarray) else v for k, v in columns.items()})
    return table.take(pa.array(np.lexsort(keys))).cast(history_arrow_schema(config))


def publish_synthetic_run(
    table: Table,
    config: Config,
    rows: pa.Table,
    run_id: str,
    windows: list[int],
    *,
    batch_rows: int | None = 65_536,
    policy: LayoutPolicy = DEFAULT_POLICY,
    snapshot_properties: dict[str, str] | None = None,
) -> list[WrittenFile]:
    """Write `rows` (in storage order, as `synthetic_rows` gives them) as window run `run_id` of the
    history table `table`, holding `windows`, and commit it; the written files."""
    files = write_run(
        rows.to_batches(max_chunksize=batch_rows),
        file_uri=partial(history_file_uri, table.location(), run_id),
        schema=history_arrow_schema(config),
        run_id=run_id,
        bucket_count=config.layout.bucket_count,
        group_order=list(config.feature_groups),
        policy=policy,
    )
    record = RunRecord(run_id, "window", windows, len(files), rows.num_rows)
    commit_runs(table, [(record, files)], snapshot_properties=snapshot_properties)
    return files


def _last_event_ts(event_ts_us, last_event_ts_us, event_count) -> pa.Array:
    if last_event_ts_us is not None:
        return pa.array(np.asarray(last_event_ts_us, np.int64)).cast(pa.timestamp("us", tz="UTC"))
    single = np.ones(len(event_ts_us), bool) if event_count is None else np.asarray(event_count) <= 1
    return pa.array(np.asarray(event_ts_us, np.int64), mask=single).cast(pa.timestamp("us", tz="UTC"))
