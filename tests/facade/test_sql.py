"""The analyst SQL in sql/ and `seqlake sql`, against a small warehouse with known content.

The warehouse is built without Spark: pyiceberg commits the history, detail and raw tables (the
history through seqlake's own run writer and `commit_runs`, with the snapshot summaries compaction
writes), and the landing and quarantine tables are Delta tables written here (Parquet files plus a
`_delta_log` commit), read back by DuckDB's delta extension like Spark's.
"""

from __future__ import annotations

import io
import json
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from seqlake.core.config import Config
from seqlake.core.errors import SetupError
from seqlake.core.events import RAW_SCHEMA
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.jobs.sql import main as sql_main
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.ingest.raw_source import create_raw_table
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.sql_session import SqlError, open_session, sql_files
from seqlake.tableformat.registry import RunRecord, commit_runs, history_file_uri
from seqlake.tableformat.run_writer import write_run
from seqlake.tableformat.schema import history_arrow_schema
from tests import forked_commands
from tests.conftest import make_config
from tests.history_data import synthetic_history

# -- the small warehouse ------------------------------------------------------------------------

W0 = 490_992  # the processing window of 2026-01-05T00:00Z (hour windows since the epoch)
USER_ROWS = {11: 3, 22: 40, 33: 400, 44: 5000}  # history rows per user

# Raw records as delivered: (window offset, source partition, lsn, user, event id or quarantine reason).
# Window 0: p0 lsn 0-2 and p1 lsn 0-2 land, p0 lsn 3 is malformed.  Window 1: p1 lsn 5 retransmits
# e10.  Window 2: two malformed records on p1.  Window 3 has landed but is not published.
RECORDS = [
    (0, 0, 0, 11, "e1"),
    (0, 0, 1, 22, "e2"),
    (0, 0, 2, 33, "e3"),
    (0, 1, 0, 44, "e4"),
    (0, 1, 1, 44, "e5"),
    (0, 1, 2, 22, "e6"),
    (0, 0, 3, None, "invalid_json"),
    (1, 0, 4, 11, "e7"),
    (1, 0, 5, 33, "e8"),
    (1, 1, 3, 44, "e9"),
    (1, 1, 4, 44, "e10"),
    (1, 1, 5, 44, "e10"),
    (2, 0, 6, 22, "e11"),
    (2, 0, 7, 44, "e12"),
    (2, 1, 6, 33, "e13"),
    (2, 1, 7, 11, "e14"),
    (2, 1, 8, None, "wrong_type"),
    (2, 1, 9, None, "missing_user_id"),
    (3, 0, 8, 44, "e15"),
    (3, 0, 9, 44, "e16"),
    (3, 0, 10, 22, "e17"),
]
# Windows 0 and 1 are published and then merged into one run; window 2 is published after the merge.
RUNS_LIVE = {f"m{W0}t{W0 + 1}": (W0, W0 + 1), f"w{W0 + 2}": (W0 + 2, W0 + 2)}


@dataclass(frozen=True)
class SmallWarehouse:
    config: Config
    history_rows: pa.Table  # every row of the history table
    landing: pa.Table
    quarantine: pa.Table


def window_of_row(table: pa.Table) -> pa.Array:
    """Each user's history split in thirds by position: first third window 0, then 1, then 2."""
    users = table["user_id"].to_pylist()
    windows: list[int] = []
    seen: dict[int, int] = {}
    for user in users:
        i = seen.get(user, 0)
        seen[user] = i + 1
        windows.append(W0 + i * 3 // USER_ROWS[user])
    return pa.array(windows, pa.int64())


def _arrival(window: int, lsn: int) -> datetime:
    return datetime.fromtimestamp((W0 + window) * 3600, UTC) + timedelta(seconds=60 * (lsn + 1))


def _landing_tables(config: Config) -> tuple[pa.Table, pa.Table]:
    schema = landing_schema(config)
    landing, quarantine = [], []
    for window, partition, lsn, user, what in RECORDS:
        arrival = _arrival(window, lsn)
        common = {"source_partition": partition, "lsn": lsn, "arrival_ts": arrival, "window_id": W0 + window}
        if user is None:
            quarantine.append({**common, "reason": what, "payload": "{not json"})
        else:
            landing.append(
                {
                    **common,
                    "user_id": user,
                    "feature_group": "engagement",
                    "event_ts": arrival - timedelta(seconds=10),
                    "event_id": what,
                    "item_id": 1000 + lsn,
                    "action_flags": 1,
                }
            )
    return pa.Table.from_pylist(landing, schema=schema), pa.Table.from_pylist(quarantine, schema=QUARANTINE_SCHEMA)


SPARK_TYPES = {
    pa.int64(): "long",
    pa.int32(): "integer",
    pa.int16(): "short",
    pa.int8(): "byte",
    pa.bool_(): "boolean",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.timestamp("us", tz="UTC"): "timestamp",
}


def write_delta(path: Path, table: pa.Table, partition: str = "window_id") -> None:
    """A Delta table as Spark writes the landing tier: one Parquet file per partition, one commit."""
    path.mkdir(parents=True)
    (path / "_delta_log").mkdir()
    schema = {
        "type": "struct",
        "fields": [
            {"name": f.name, "type": SPARK_TYPES[f.type], "nullable": True, "metadata": {}} for f in table.schema
        ],
    }
    now = 1_767_571_200_000
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "WRITE", "isBlindAppend": True}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, str(path))),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [partition],
                "configuration": {},
                "createdTime": now,
            }
        },
    ]
    for value in sorted(set(table[partition].to_pylist())):
        rows = table.filter(pc.equal(table[partition], value)).drop_columns([partition])
        name = f"{partition}={value}/part-00000-{value}.c000.zstd.parquet"
        (path / name).parent.mkdir()
        pq.write_table(rows, path / name, compression="zstd")
        actions.append(
            {
                "add": {
                    "path": name,
                    "partitionValues": {partition: str(value)},
                    "size": (path / name).stat().st_size,
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": json.dumps({"numRecords": rows.num_rows}),
                }
            }
        )
    (path / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def _frontier(landing: pa.Table, quarantine: pa.Table, window: int) -> dict[str, int]:
    frontier: dict[str, int] = {}
    for table in (landing, quarantine):
        for row in table.filter(pc.less_equal(table["window_id"], window)).to_pylist():
            key = str(row["source_partition"])
            frontier[key] = max(frontier.get(key, -1), row["lsn"])
    return dict(sorted(frontier.items()))


def _write_run(history, config: Config, rows: pa.Table, run_id: str):
    return write_run(
        rows.to_batches(max_chunksize=4096),
        file_uri=lambda bucket: history_file_uri(history.location(), run_id, bucket),
        schema=history_arrow_schema(config),
        run_id=run_id,
        bucket_count=config.layout.bucket_count,
        group_order=list(config.feature_groups),
    )


def build_small_warehouse(root: Path) -> SmallWarehouse:
    """history (runs m<W0>t<W0+1> and w<W0+2>), history_detail, raw_events, landing and quarantine."""
    config = make_config(root)
    catalog = open_catalog(config)
    landing, quarantine = _landing_tables(config)

    raw = create_raw_table(catalog, table_identifier(config, "raw_events"))
    for window in range(4):
        records = [
            {
                "source_partition": partition,
                "lsn": lsn,
                "arrival_ts": _arrival(window, lsn),
                "payload": json.dumps({"event_id": what}) if user else "{not json",
            }
            for w, partition, lsn, user, what in RECORDS
            if w == window
        ]
        raw.append(pa.Table.from_pylist(records, schema=RAW_SCHEMA))

    paths = landing_paths(config)
    write_delta(Path(paths.events.removeprefix("file://")), landing)
    write_delta(Path(paths.quarantine.removeprefix("file://")), quarantine)

    history, detail = history_tables(config)
    rows = synthetic_history(config, USER_ROWS)
    rows = rows.set_column(rows.schema.get_field_index("window_id"), "window_id", window_of_row(rows))
    detail_schema = detail.schema().as_arrow()
    for window in (W0, W0 + 1, W0 + 2):
        run_id = f"w{window}"
        files = _write_run(history, config, rows.filter(pc.equal(rows["window_id"], window)), run_id)
        record = RunRecord(run_id, "window", [window, window], len(files), sum(f.facts.row_count for f in files))
        summary = {
            "seqlake.window-id": str(window),
            "seqlake.frontier": json.dumps(_frontier(landing, quarantine, window)),
        }
        commit_runs(history, [(record, files)], snapshot_properties=summary)
        events = landing.filter(pc.equal(landing["window_id"], window))
        first = [events["event_id"].to_pylist().index(e) for e in dict.fromkeys(events["event_id"].to_pylist())]
        detail.append(events.take(first).cast(detail_schema), snapshot_properties={"seqlake.window-id": str(window)})
        if window == W0 + 1:  # capacity merge of the two window runs
            merged_id = f"m{W0}t{W0 + 1}"
            merged = rows.filter(pc.less_equal(rows["window_id"], W0 + 1))
            files = _write_run(history, config, merged, merged_id)
            record = RunRecord(merged_id, "merge", [W0, W0 + 1], len(files), merged.num_rows)
            commit_runs(history, [(record, files)], replaces=[f"w{W0}", f"w{W0 + 1}"])
    return SmallWarehouse(config, rows, landing, quarantine)


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> SmallWarehouse:
    return build_small_warehouse(tmp_path_factory.mktemp("sql") / "warehouse")


@pytest.fixture(scope="module")
def session(small):
    session = open_session(small.config, quiet=True)
    yield session
    session.close()


def rows(session, sql: str, *params) -> list[tuple]:
    return session.con.execute(sql, list(params) or None).fetchall()


def utc(hour: int) -> datetime:
    return datetime(2026, 1, 5, hour, tzinfo=UTC)


def file_sizes(folder: Path, live: set[str] | None = None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.parquet") if live is None or str(p) in live)


def live_history_files(small: SmallWarehouse) -> set[str]:
    table = open_catalog(small.config).load_table(table_identifier(small.config, "history"))
    return {task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()}


TESTED_FILES = {"catalog.sql", "freshness.sql", "history.sql", "runs.sql", "storage.sql"}


def test_every_sql_file_is_tested_and_loads_completely(session):
    assert {p.name for p in sql_files()} == TESTED_FILES
    assert session.missing == {}  # every relation of the small warehouse exists: nothing skipped
    assert set(session.tables) == {"history", "history_detail", "raw_events", "landing_events", "quarantine"}


# -- catalog.sql ----------------------------------------------------------------------------------

MERGED, LAST = f"m{W0}t{W0 + 1}", f"w{W0 + 2}"


def test_catalog_history_snapshots(session):
    got = rows(
        session,
        "SELECT sequence_number, seqlake_operation, added_runs, replaced_runs, window_id, frontier, total_rows "
        "FROM history_snapshots",
    )
    # Rows per window: each user's history in thirds (3 -> 1/1/1, 40 -> 14/13/13, 400 -> 134/133/133, ...).
    assert got == [
        (1, "publish-runs", [f"w{W0}"], None, W0, {0: 3, 1: 2}, 1816),
        (2, "publish-runs", [f"w{W0 + 1}"], None, W0 + 1, {0: 5, 1: 5}, 3630),
        (3, "merge-runs", [MERGED], [f"w{W0}", f"w{W0 + 1}"], None, None, 3630),
        (4, "publish-runs", [LAST], None, W0 + 2, {0: 7, 1: 9}, 5443),
    ]


def test_catalog_runs_and_windows(session, small):
    from seqlake.tableformat.bucketing import bucket_of

    # Every user has rows in every window, so each run has one file per bucket of the four users.
    files = len(set(bucket_of(pa.array(list(USER_ROWS), pa.int64()), small.config.layout.bucket_count).tolist()))
    assert rows(session, "FROM history_runs") == [
        (MERGED, "merge", W0, W0 + 1, [W0, W0 + 1], files, 3630),
        (LAST, "window", W0 + 2, W0 + 2, [W0 + 2], files, 1813),
    ]
    assert rows(session, "SELECT window_id, run_id, kind FROM window_runs") == [
        (W0, MERGED, "merge"),
        (W0 + 1, MERGED, "merge"),
        (W0 + 2, LAST, "window"),
    ]


def test_catalog_file_macros_match_storage(session, small):
    root = small.config.warehouse_path()
    history = root / "seqlake" / "history"
    live = live_history_files(small)
    got = rows(
        session,
        "SELECT live, count(*), sum(row_count), sum(bytes) FROM iceberg_files(getvariable('history_metadata'), "
        "getvariable('history_location')) GROUP BY live ORDER BY live",
    )
    every = file_sizes(history / "data")
    assert got == [
        (False, 6, None, every - file_sizes(history / "data", live)),  # the replaced window runs' files
        (True, len(live), 5443, file_sizes(history / "data", live)),
    ]
    landing = rows(
        session,
        "SELECT live, count(*), list(row_count ORDER BY file_path), sum(bytes) "
        "FROM delta_files(getvariable('landing_events_location')) GROUP BY live",
    )
    assert landing == [(True, 4, [6, 5, 4, 3], file_sizes(root / "landing" / "seqlake" / "events"))]
    assert rows(session, "SELECT path_key('file:///a/b'), path_key('file:/a/b'), path_key('/a/b')") == [
        ("/a/b", "/a/b", "/a/b")
    ]
    assert rows(
        session,
        "SELECT count(*), list(DISTINCT operation) FROM iceberg_snapshot_log(getvariable('raw_events_metadata'))",
    ) == [(4, ["append"])]
    assert rows(
        session,
        "SELECT value FROM iceberg_properties(getvariable('history_metadata')) "
        "WHERE property = 'seqlake.feature-groups'",
    ) == [("engagement,search,purchase",)]


# -- freshness.sql --------------------------------------------------------------------------------


def test_window_freshness(session):
    got = rows(
        session,
        "SELECT window_id, window_start, landed_rows, landed_events, quarantined_rows, published, run_id, frontier "
        "FROM window_freshness",
    )
    assert got == [
        (W0, utc(0), 6, 6, 1, True, MERGED, {0: 3, 1: 2}),
        (W0 + 1, utc(1), 5, 4, 0, True, MERGED, {0: 5, 1: 5}),  # e10 arrived twice
        (W0 + 2, utc(2), 4, 4, 2, True, LAST, {0: 7, 1: 9}),
        (W0 + 3, utc(3), 3, 3, 0, False, None, None),
    ]
    # A window's publication time is its own commit's, even after a merge rewrote it.
    published = rows(session, "SELECT window_id, published_at FROM window_freshness WHERE published")
    commits = dict(rows(session, "SELECT window_id, committed_at FROM history_snapshots WHERE window_id IS NOT NULL"))
    assert dict(published) == commits


def test_partition_freshness(session):
    # p0 landed up to LSN 10 but window 3 (LSNs 8-10) is not published; p1's newest LSN 9 is published.
    assert rows(session, "FROM partition_freshness") == [(0, 10, 7, W0 + 2, 3), (1, 9, 9, W0 + 2, 0)]


# -- history.sql ----------------------------------------------------------------------------------

KEYS = ["user_id", "feature_group", "event_ts", "lsn"]


def expected_history(small: SmallWarehouse, user: int, groups=None, top_k=None) -> pa.Table:
    table = small.history_rows.filter(pc.equal(small.history_rows["user_id"], user))
    if groups is not None:
        table = table.filter(pc.is_in(table["feature_group"], pa.array(groups)))
    table = table.sort_by([("event_ts", "ascending"), ("lsn", "ascending")])
    return table if top_k is None else table.slice(max(0, table.num_rows - top_k))


def test_user_history_is_the_users_rows_in_sequence_order(session, small):
    for user in USER_ROWS:
        got = session.con.execute("FROM user_history(?)", [user]).arrow().read_all()
        expected = expected_history(small, user)
        assert got.num_rows == USER_ROWS[user]
        assert got.column_names == expected.column_names
        assert got.select(KEYS + ["item_id"]).to_pylist() == expected.select(KEYS + ["item_id"]).to_pylist()
    recent = session.con.execute("FROM user_recent(?, ?)", [44, 7]).arrow().read_all()
    assert recent.select(KEYS).to_pylist() == expected_history(small, 44, top_k=7).select(KEYS).to_pylist()
    assert rows(session, "SELECT count(*) FROM user_history(?)", 999) == [(0,)]


def test_tenant_history_reads_what_the_tenant_reads(session, small):
    from seqlake.tableformat.reader import HistoryReader, Selection

    config = small.config
    history = open_catalog(config).load_table(table_identifier(config, "history"))
    for tenant, spec in config.tenants.items():
        columns = config.tenant_columns(tenant)
        for user in (11, 44):
            got = session.con.execute("FROM tenant_history(?, ?)", [user, tenant]).arrow().read_all()
            assert got.column_names == KEYS + columns
            expected = expected_history(small, user, spec.feature_groups, spec.max_length)
            assert got.num_rows == min(expected.num_rows, spec.max_length)
            assert got.to_pylist() == expected.select(KEYS + columns).to_pylist()
            # seqlake's own pushed-down reader returns the same sequence.
            selection = Selection(
                feature_groups=tuple(spec.feature_groups), columns=tuple(KEYS + columns), top_k=spec.max_length
            )
            assert HistoryReader(history).read_user(user, selection=selection).to_pylist() == got.to_pylist()
    assert rows(session, "SELECT tenant, feature_groups, max_length FROM tenants") == [
        (name, list(spec.feature_groups), spec.max_length) for name, spec in config.tenants.items()
    ]


def test_history_lengths_and_distribution(session, small):
    events: dict[int, int] = {}
    for user, count in zip(
        small.history_rows["user_id"].to_pylist(), small.history_rows["event_count"].to_pylist(), strict=True
    ):
        events[user] = events.get(user, 0) + count
    assert rows(session, "SELECT user_id, row_count, events FROM history_lengths ORDER BY user_id") == [
        (user, n, events[user]) for user, n in USER_ROWS.items()
    ]
    assert rows(session, "SELECT min_rows, max_rows, users, row_count FROM length_distribution") == [
        (2, 3, 1, 3),
        (32, 63, 1, 40),
        (256, 511, 1, 400),
        (4096, 8191, 1, 5000),
    ]


@pytest.mark.parametrize(
    "value",
    ["11 OR 1=1", "11); DROP VIEW history; --", "0 UNION ALL SELECT * FROM history", "'; SELECT 1; --"],
)
def test_user_ids_are_bound_values_never_sql(session, value):
    for sql in ("FROM user_history($uid)", "FROM user_recent($uid, 5)", "FROM tenant_history($uid, 'ranking')"):
        with pytest.raises(SqlError, match="Could not convert string"):
            session.run(sql, {"uid": value})
    assert rows(session, "SELECT count(*) FROM history") == [(5443,)]


def test_a_tenant_is_a_value_too(session):
    with pytest.raises(SqlError, match="unknown tenant retrieval' OR '1'='1 \\(tenants: retrieval, ranking\\)"):
        session.run("FROM tenant_history(44, $t)", {"t": "retrieval' OR '1'='1"})


# -- runs.sql -------------------------------------------------------------------------------------


def test_runs_are_checked_against_their_files(session, small):
    live = live_history_files(small)
    data = small.config.warehouse_path() / "seqlake" / "history" / "data"

    def run_bytes(run_id: str) -> int:
        return sum(p.stat().st_size for p in data.rglob(f"r{run_id}-b*.parquet") if str(p) in live)

    got = rows(session, "SELECT run_id, kind, first_window, last_window, row_count, bytes, matches_files FROM runs")
    assert got == [
        (MERGED, "merge", W0, W0 + 1, 3630, run_bytes(MERGED), True),
        (LAST, "window", W0 + 2, W0 + 2, 1813, run_bytes(LAST), True),
    ]
    published = dict(rows(session, "SELECT run_id, published_at FROM runs"))
    commits = rows(session, "SELECT added_runs[1], committed_at FROM history_snapshots")
    assert published == {run: at for run, at in commits if run in published}
    by_run = rows(
        session,
        "SELECT run_id, live, count(*), list(DISTINCT bucket ORDER BY bucket) FROM run_files GROUP BY ALL ORDER BY ALL",
    )
    assert [(r, lv) for r, lv, _, _ in by_run] == [
        (MERGED, True),
        (f"w{W0}", False),
        (f"w{W0 + 1}", False),
        (LAST, True),
    ]
    assert all(n == len(b) for _, _, n, b in by_run)  # one file per bucket in each run


# -- storage.sql ----------------------------------------------------------------------------------


def test_table_storage(session, small):
    root = small.config.warehouse_path()
    live = live_history_files(small)
    tables = root / "seqlake"
    got = {r[0]: r[1:] for r in rows(session, "SELECT * EXCLUDE (bytes_per_row) FROM table_storage")}
    history_live = file_sizes(tables / "history" / "data", live)
    assert got == {
        "history": ("iceberg", 6, 5443, history_live, 6, file_sizes(tables / "history" / "data") - history_live),
        # One file per window.
        "history_detail": ("iceberg", 3, 14, file_sizes(tables / "history_detail" / "data"), 0, 0),
        "raw_events": ("iceberg", 4, 21, file_sizes(tables / "raw_events" / "data"), 0, 0),
        "landing_events": ("delta", 4, 18, file_sizes(root / "landing" / "seqlake" / "events"), 0, 0),
        "quarantine": ("delta", 2, 3, file_sizes(root / "landing" / "seqlake" / "quarantine"), 0, 0),
    }
    summary = rows(session, "SELECT part, tables, files, row_count, bytes, pct_of_bytes FROM storage_summary")
    others = [v for k, v in got.items() if k != "history"]
    other_bytes = sum(v[3] for v in others)
    assert summary == [
        ("history", ["history"], 6, 5443, history_live, round(100 * history_live / (history_live + other_bytes), 1)),
        (
            "other tables",
            ["history_detail", "landing_events", "quarantine", "raw_events"],
            13,
            56,
            other_bytes,
            round(100 * other_bytes / (history_live + other_bytes), 1),
        ),
    ]


def test_history_column_storage_is_the_manifests_column_sizes(session, small):
    table = open_catalog(small.config).load_table(table_identifier(small.config, "history"))
    names = {field.field_id: field.name for field in table.schema().fields}
    sizes: dict[str, int] = {}
    for task in table.scan().plan_files():
        for field_id, size in task.file.column_sizes.items():
            sizes[names[field_id]] = sizes.get(names[field_id], 0) + size
    got = rows(session, "SELECT column_name, bytes, bytes_per_row FROM history_column_storage")
    assert {name: size for name, size, _ in got} == sizes
    assert all(per_row == round(sizes[name] / 5443, 3) for name, _, per_row in got)


# -- seqlake sql ----------------------------------------------------------------------------------

FILE_OUTPUT = {  # the columns of each result a file prints with --file, in order
    "catalog.sql": [
        [
            "sequence_number",
            "committed_at",
            "seqlake_operation",
            "added_runs",
            "replaced_runs",
            "window_id",
            "frontier",
            "total_rows",
        ]
    ],
    "freshness.sql": [
        [
            "window_id",
            "window_start",
            "landed_rows",
            "landed_events",
            "quarantined_rows",
            "published",
            "run_id",
            "published_at",
            "frontier",
        ],
        ["source_partition", "landed_lsn", "published_lsn", "published_window", "lsns_behind"],
    ],
    "history.sql": [
        ["tenant", "feature_groups", "columns", "max_length"],
        ["min_rows", "max_rows", "users", "row_count", "pct_of_rows"],
    ],
    "runs.sql": [
        [
            "run_id",
            "kind",
            "first_window",
            "last_window",
            "files",
            "row_count",
            "bytes",
            "published_at",
            "matches_files",
        ],
        ["run_id", "live", "files", "row_count", "bytes"],
    ],
    "storage.sql": [
        [
            "table_name",
            "format",
            "files",
            "row_count",
            "bytes",
            "bytes_per_row",
            "unreferenced_files",
            "unreferenced_bytes",
        ],
        ["part", "tables", "files", "row_count", "bytes", "pct_of_bytes"],
    ],
}


@pytest.fixture
def on_small(small, monkeypatch):
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(small.config.warehouse_path()))
    return small


@pytest.mark.parametrize("name", sorted(TESTED_FILES))
def test_seqlake_sql_file_prints_each_result(on_small, capsys, name):
    assert sql_main(["--file", name.removesuffix(".sql")]) == 0
    results = [block for block in capsys.readouterr().out.split("\n\n") if block.strip()]
    assert [block.splitlines()[0].split() for block in results] == FILE_OUTPUT[name]
    for block in results:
        assert block.splitlines()[-1].endswith(("row)", "rows)"))


def test_seqlake_sql_json_document_and_params(on_small, capsys):
    query = "SELECT user_id, row_count FROM history_lengths WHERE user_id = $uid"
    assert sql_main(["--query", query, "-p", "uid=44", "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["results"] == [
        {"statement": query, "columns": ["user_id", "row_count"], "rows": [{"user_id": 44, "row_count": 5000}]}
    ]


@pytest.mark.parametrize(
    ("param", "value", "duckdb_type"),
    [
        ("v=44", 44, "INTEGER"),
        ("v=-3", -3, "INTEGER"),
        ("v=4611686018427400249", 4611686018427400249, "BIGINT"),
        ("v=2.5", 2.5, "DOUBLE"),
        ("v=true", True, "BOOLEAN"),
        ("v=2026-01-05T10:00:00Z", "2026-01-05T10:00:00Z", "TIMESTAMP WITH TIME ZONE"),
        ("v=2026-01-05 10:00:00", "2026-01-05T10:00:00Z", "TIMESTAMP"),
        ("v=ann", "ann", "VARCHAR"),
        ("v=nan", "nan", "VARCHAR"),
        ("v:text=007", "007", "VARCHAR"),
        ("v:int=007", 7, "INTEGER"),
        ("v:float=3", 3.0, "DOUBLE"),
        ("v:date=2026-01-05", "2026-01-05", "DATE"),
        ("v:bool=FALSE", False, "BOOLEAN"),
        ("v=", "", "VARCHAR"),
    ],
)
def test_seqlake_sql_params_bind_typed_values(on_small, capsys, param, value, duckdb_type):
    assert sql_main(["--quiet", "--query", "SELECT $v AS v, typeof($v) AS t", "-p", param, "--output", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"][0]["rows"]
    assert row == {"v": value, "t": duckdb_type}


@pytest.mark.parametrize(
    ("param", "says"),
    [
        ("v:int=ann", "v: 'ann' is not an integer"),
        ("v:bool=maybe", "v: 'maybe' is not true or false"),
        ("v:timestamp=noon", "v: 'noon' is not an ISO 8601 time"),
        ("v:money=5", "unknown type 'money'"),
        ("1v=5", "is not NAME=VALUE"),
    ],
)
def test_seqlake_sql_a_param_of_the_wrong_type_is_a_usage_error(on_small, capsys, param, says):
    with pytest.raises(SystemExit) as exited:
        sql_main(["--query", "SELECT $v", "-p", param])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert says in line and line.startswith("seqlake sql: error: --param: ")


def test_seqlake_sql_errors_are_clear(on_small, tmp_path):
    with pytest.raises(SqlError, match="no SQL file 'nope' .*storage.sql"):
        sql_main(["--file", "nope"])
    with pytest.raises(SqlError, match="parameters \\['uid'\\] are not used"):
        sql_main(["--query", "SELECT 1", "-p", "uid=1"])
    script = tmp_path / "mine.sql"
    script.write_text("SELECT 1;\nSELECT no_such_column FROM history;\n")
    with pytest.raises(SqlError, match="mine.sql: SELECT no_such_column FROM history;\nBinder Error"):
        sql_main(["--file", str(script)])


def test_seqlake_sql_command_exit_codes(on_small):
    def run(*args):
        return forked_commands.run([sys.executable, "-m", "seqlake.jobs.sql", *args], capture_output=True, text=True)

    ok = run("--query", "SELECT count(*) AS n FROM user_history($uid)", "-p", "uid=33")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[:3] == ["  n", "───", "400"]
    bad = run("--query", "SELECT count(*) FROM user_history($uid)", "-p", "uid=33 OR 1=1")
    assert bad.returncode == 1
    assert "Conversion Error: Could not convert string '33 OR 1=1' to INT64" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_seqlake_sql_file_never_echoes_a_file_that_is_not_sql(on_small, tmp_path):
    secret = "hunter2-s3cr3t"
    notes = tmp_path / "notes.txt"
    notes.write_text(f"meeting notes\npassword = {secret}\nSELECT is not a verb here\n")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x89PNG\r\n" + secret.encode() + bytes(range(256)))
    latin = tmp_path / "latin.txt"
    latin.write_bytes(f"caf\xe9 {secret}".encode("latin-1"))
    catalog = on_small.config.warehouse_path() / "catalog.db"  # a real binary: SQLite pages
    cases = {
        notes: "not SQL that DuckDB parses (a syntax error at line 1)",
        blob: "not a SQL file (binary content)",
        latin: "not a SQL file (not UTF-8 text)",
        catalog: "not a SQL file (binary content)",
    }
    for path, reason in cases.items():
        done = forked_commands.run(
            [sys.executable, "-m", "seqlake.jobs.sql", "--file", str(path)], capture_output=True, text=True
        )
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [f"seqlake sql: error: --file {path}: {reason}; its content is not shown"], (
            done.stderr
        )
        assert secret not in done.stdout + done.stderr and "meeting" not in done.stderr


def test_interactive_prompt(on_small, monkeypatch, capsys):
    lines = "SELECT count(*) AS n\n  FROM history;\nSELECT nope;\nSELECT 2 AS two;\n.quit\nSELECT 3 AS three;\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert sql_main([]) == 0
    captured = capsys.readouterr()
    assert "5443" in captured.out and "two" in captured.out and "three" not in captured.out
    assert 'Binder Error: Referenced column "nope" was not found' in captured.err


def test_the_prompt_lists_tables_and_describes_one(on_small, monkeypatch, capsys):
    lines = ".tables\n.schema history\n.schema nope\n.frobnicate\nSELECT 2 AS two;\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert sql_main([]) == 0
    captured = capsys.readouterr()
    listed = captured.out.split("column_name")[0]
    assert "history  (iceberg)" in listed and "landing_events  (delta)" in listed
    described = captured.out.split("column_name")[1]
    assert "user_id" in described and "event_ts" in described and "BIGINT" in described
    assert "error: .schema NAME: nope is not a table here (tables: history, " in captured.err
    assert "error: unknown command .frobnicate (commands: .tables  .schema NAME  .quit)" in captured.err
    assert "two" in captured.out


def test_a_warehouse_without_landing_tables(tmp_path):
    config = make_config(tmp_path / "warehouse")
    history, _ = history_tables(config)
    rows_ = synthetic_history(config, {7: 10})
    files = _write_run(history, config, rows_, "w1")
    commit_runs(history, [(RunRecord("w1", "window", [1, 1], len(files), 10), files)])
    with open_session(config, quiet=True) as session:
        assert set(session.tables) == {"history", "history_detail"}
        assert {"raw_events", "landing_events", "quarantine", "window_freshness", "files_quarantine"} <= set(
            session.missing
        )
        assert session.missing["window_freshness"] == "needs landing_events, quarantine"
        assert rows(session, "SELECT count(*) FROM user_history(7)") == [(10,)]
        assert rows(session, "SELECT table_name, files, row_count FROM table_storage") == [
            ("history", 1, 10),
            ("history_detail", 0, 0),
        ]
        with pytest.raises(SqlError, match="not in this warehouse: window_freshness: needs landing_events, quarantine"):
            session.run("FROM window_freshness")


def test_a_missing_warehouse_is_an_error_not_a_new_warehouse(tmp_path):
    with pytest.raises(SetupError, match="no warehouse at .*nowhere"):
        open_session(make_config(tmp_path / "nowhere"))
    assert not (tmp_path / "nowhere").exists()
