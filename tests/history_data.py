"""Synthetic history rows for table-format tests: realistic shapes, exact control over lengths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from benchmarks.synthetic import increasing_per_user, pick_groups, publish_synthetic_run, synthetic_rows
from seqlake.core.config import Config
from seqlake.tableformat.layout import LayoutPolicy

BASE_TS_US = 1_767_571_200_000_000  # 2026-01-05T00:00:00Z


def synthetic_history(config: Config, lengths: dict[int, int], seed: int = 1) -> pa.Table:
    """History rows for users {user_id: rows}, ordered by (bucket, user, group, event_ts, lsn): event
    times from BASE_TS_US 1-60 s apart, LSNs a few units apart (user-specific bases), hourly windows."""
    rng = np.random.default_rng(seed)
    users = np.fromiter(lengths, np.int64)
    counts = np.fromiter(lengths.values(), np.int64)
    n = int(counts.sum())
    user = np.repeat(users, counts)
    ts = BASE_TS_US + increasing_per_user(counts, rng, 1_000_000, 60_000_000)
    lsn = increasing_per_user(counts, rng, 1, 5) + user % 1000 * 1_000_000
    return synthetic_rows(
        config,
        user_id=user,
        feature_group=pick_groups(config, n, rng),
        event_ts_us=ts,
        lsn=lsn,
        min_lsn=lsn - rng.integers(0, 2, n),
        source_partition=user % 4,
        event_count=rng.integers(1, 4, n),
        window_id=(ts - BASE_TS_US) // 3_600_000_000,
        rng=rng,
    )


def publish_run(
    table, config: Config, data: pa.Table, run_id: str, batch_rows: int = 4096, policy=None, frontier: bool = True
):
    """Write `data` (bucket-ordered) as sorted run `run_id` and commit it, with the LSN frontier as a
    publication records it (`frontier` False: none, as a table written before the frontier was kept);
    return the written files."""
    from seqlake.tableformat.frontier import FRONTIER_PROPERTY, published_frontier
    from seqlake.tableformat.layout import DEFAULT_POLICY

    # A window run holds the window its id names; the synthetic rows' window_id need not say so.
    named = run_id[1:] if run_id.startswith("w") and run_id[1:].isdigit() else None
    windows = [int(named)] if named is not None else pa.compute.unique(data["window_id"]).to_pylist()
    properties = None
    if frontier:
        highest = data.group_by("source_partition").aggregate([("lsn", "max")])
        own = dict(zip(highest["source_partition"].to_pylist(), highest["lsn_max"].to_pylist(), strict=True))
        properties = {FRONTIER_PROPERTY: published_frontier(table).advanced(own).to_json()}
        if named is not None:
            properties["seqlake.window-id"] = named
    return publish_synthetic_run(
        table,
        config,
        data,
        run_id,
        windows,
        batch_rows=batch_rows,
        policy=policy or DEFAULT_POLICY,
        snapshot_properties=properties,
    )


def two_partition_rows(
    config: Config, user: int, rows: int, first_lsn: dict[int, int], start_us: int = BASE_TS_US, seed: int = 5
) -> pa.Table:
    """`rows` engagement rows of one user alternating between source partitions 0 and 1, event times a
    minute apart from `start_us`, LSNs counting up by one per partition from `first_lsn[p]`."""
    index = np.arange(rows, dtype=np.int64)
    partition = (index % 2).astype(np.int32)
    lsn = np.where(partition == 0, first_lsn[0], first_lsn[1]) + index // 2
    return synthetic_rows(
        config,
        user_id=np.full(rows, user, np.int64),
        feature_group=np.full(rows, "engagement", object),
        event_ts_us=start_us + index * 60_000_000,
        lsn=lsn,
        source_partition=partition,
        rng=np.random.default_rng(seed),
    )


def history_table(config: Config, name: str = "history"):
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.tableformat.registry import create_history_table

    return create_history_table(open_catalog(config), table_identifier(config, name), config, replace=True)


# Small row groups, so that selections cross dedicated, packed and split row groups.
SMALL_ROW_GROUPS = LayoutPolicy(dedicated_user_rows=1000, packed_row_group_rows=2000, max_row_group_rows=3000)
BASE = datetime.fromtimestamp(BASE_TS_US / 1e6, UTC)


PARTITIONS = 4  # synthetic_history puts user u's rows in source partition u % 4


def lsn_base(user: int) -> int:
    """Where synthetic_history's LSNs start for `user`."""
    return user % 1000 * 1_000_000


def frontiers(lsns=None):
    """Hypothesis strategy of frontiers over the synthetic partitions: {partition: LSN} naming one
    to all of them (`lsns`: the LSN strategy; default: offsets 0..3000 from a user's base, see
    `shifted`)."""
    from hypothesis import strategies as st

    from seqlake.tableformat.frontier import Frontier

    values = lsns if lsns is not None else st.integers(0, 3_000)
    return st.dictionaries(st.integers(0, PARTITIONS - 1), values, min_size=1).map(Frontier)


def shifted(selection, user: int):
    """`selection` with its frontier's offsets moved to `user`'s LSNs (a user's rows lie in one
    partition: the same rows as the scalar bound base + offset used to select)."""
    from seqlake.tableformat.frontier import Frontier
    from seqlake.tableformat.reader import Selection

    if selection.as_of is None:
        return selection
    moved = Frontier({p: lsn_base(user) + lsn for p, lsn in selection.as_of.items()})
    return Selection(**{**selection.__dict__, "as_of": moved})


def selections(columns=None, as_of=None):
    """Hypothesis strategy of reader selections over synthetic histories (event times from BASE)."""
    from hypothesis import strategies as st

    from seqlake.tableformat.reader import Selection

    return st.builds(
        lambda groups, cols, start, length, frontier, top_k, newest: Selection(
            feature_groups=groups,
            columns=cols,
            start=None if start is None else BASE + timedelta(hours=start),
            end=None if start is None or length is None else BASE + timedelta(hours=start + length),
            as_of=frontier,
            top_k=top_k,
            newest_first=newest,
        ),
        st.one_of(st.none(), st.sampled_from([("engagement",), ("search", "purchase"), ("purchase",)])),
        columns if columns is not None else st.none(),
        st.one_of(st.none(), st.integers(0, 60)),
        st.one_of(st.none(), st.integers(1, 40)),
        st.one_of(st.none(), as_of if as_of is not None else frontiers()),
        st.one_of(st.none(), st.integers(0, 400)),
        st.booleans(),
    )


def frontier_sql(frontier) -> tuple[str, list[int]]:
    """A plain SQL condition for "covered by `frontier`" over source_partition and lsn, with its
    parameters: the reference the readers are checked against."""
    if not frontier:
        return "FALSE", []
    terms = " OR ".join("(source_partition = ? AND lsn <= ?)" for _ in frontier)
    return f"({terms})", [value for p, lsn in frontier.items() for value in (p, lsn)]


HOUR_US = 3_600_000_000
TRAVEL_WINDOW = BASE_TS_US // HOUR_US  # BASE's hourly processing window (epoch-aligned, 3600 s windows)


def time_travel_history(config: Config, user: int, name: str = "history"):
    """Two publications of one user's rows from source partitions 0 and 1 (20 rows each, a minute
    apart): window TRAVEL_WINDOW with LSNs p0 100..109, p1 10..19, then the next window with p0
    110..119, p1 20..29; then a run committed without a frontier (as a merge or a rewrite is), of
    another user. Returns the table, the three snapshot ids and the user's rows in sequence order."""
    table = history_table(config, name)
    snapshots, parts = [], []
    for window, first in ((TRAVEL_WINDOW, {0: 100, 1: 10}), (TRAVEL_WINDOW + 1, {0: 110, 1: 20})):
        rows = two_partition_rows(config, user, 20, first, start_us=window * HOUR_US)
        publish_run(table, config, rows, f"w{window}")
        snapshots.append(table.current_snapshot().snapshot_id)
        parts.append(rows)
    other = two_partition_rows(config, user + 1, 4, {0: 500, 1: 500}, start_us=(TRAVEL_WINDOW + 5) * HOUR_US)
    publish_run(table, config, other, "x1", frontier=False)
    snapshots.append(table.current_snapshot().snapshot_id)
    return table, snapshots, pa.concat_tables(parts)


def micros_rows(arrow: pa.Table) -> list[dict]:
    """Rows in key order with every timestamp as epoch microseconds: engines differ in how they hand
    out time zones."""
    from seqlake.tableformat.schema import KEY_COLUMNS

    arrow = arrow.sort_by([(k, "ascending") for k in KEY_COLUMNS])
    for i, field in enumerate(arrow.schema):
        if pa.types.is_timestamp(field.type):
            arrow = arrow.set_column(i, field.name, arrow[field.name].cast(pa.int64()))
    return arrow.to_pylist()


def micros_select(schema: pa.Schema, function: str) -> str:
    """A SELECT list of `schema`'s columns, timestamps through the engine's epoch-microseconds
    `function` (`epoch_us` in DuckDB, `unix_micros` in Spark)."""
    return ", ".join(f"{function}({f.name}) AS {f.name}" if pa.types.is_timestamp(f.type) else f.name for f in schema)
