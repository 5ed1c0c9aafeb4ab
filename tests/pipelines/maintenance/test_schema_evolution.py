"""Schema evolution of a history table that outlives its first configuration (DuckDB engine, no JVM).

A feature group gains a column, two columns widen (int32 -> int64, float32 -> float64, and int16 ->
int32 within Iceberg's `int`), one is retired and later added again under its old name. Opening the
table with the changed configuration is one line naming every difference and `seqlake migrate`;
after the migration old runs stay as they are on disk, new runs carry the new schema with the
table's field ids, and seqlake's reader (plain, cached, Top-K by pages) and DuckDB return the old
rows with nulls for what they predate (DuckDB both by iceberg_scan and through `seqlake sql`'s verified
history view). A merge of old and new runs writes the current schema and
keeps every row; fsck passes throughout."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from benchmarks.merge import BASE_WINDOW, publish_window, window_rows
from seqlake.core.config import DEFAULT_CONFIG_PATH, Config, parse_config
from seqlake.core.errors import SchemaError
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb import merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.maintenance.migrate import migrate, plan_migration
from seqlake.sql_session import open_session
from seqlake.tableformat.cache import CachedHistoryReader
from seqlake.tableformat.evolution import field_id, file_schema
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader, Selection
from seqlake.tableformat.registry import files_of_runs, live_runs
from seqlake.tableformat.schema import KEY_COLUMNS, history_arrow_schema

BIG_WATCH = 2**40
HEAVY = 1_000_003  # one long history in one old run (a Top-K reads it by pages); no other run holds it


def config_of(warehouse: Path, version: int, max_runs: int = 10) -> Config:
    """Version 1: the packaged feature groups. 2: engagement gains `rating`, `watch_time_ms` and
    `completion_ratio` widen, `position` widens within Iceberg's int, `session_id` is retired.
    3: version 2 with `session_id` added again, as int64 (a new column under an old name)."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    data["layout"] = {**data["layout"], "bucket_count": 2, "max_runs": max_runs}
    columns = data["feature_groups"]["engagement"]["columns"]
    if version >= 2:
        columns["watch_time_ms"]["type"] = "int64"
        columns["completion_ratio"]["type"] = "float64"
        columns["position"]["type"] = "int32"
        del columns["session_id"]
        columns["rating"] = {"type": "int32", "merge": "max"}
    if version >= 3:
        columns["session_id"] = {"type": "int64", "merge": "last"}
    return parse_config(data, f"version {version}")


def rows_of(config: Config, window: int, rows: int, seed: int, heavy: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    table = window_rows(config, window, rows, 40, rng)
    if heavy:
        extra = window_rows(config, window, heavy, 1, rng)
        extra = extra.set_column(0, "user_id", pa.array(np.full(heavy, HEAVY, np.int64)))
        extra = extra.set_column(1, "feature_group", pa.array(["engagement"] * heavy))  # one long segment
        lsn = pc.add(extra["lsn"], 5_000_000)
        extra = extra.set_column(extra.schema.get_field_index("lsn"), "lsn", lsn)
        extra = extra.set_column(extra.schema.get_field_index("min_lsn"), "min_lsn", lsn)
        table = pa.concat_tables([table, extra.cast(table.schema)])
    if "watch_time_ms" in table.schema.names and pa.types.is_int64(table.schema.field("watch_time_ms").type):
        big = pc.add(pc.cast(table["watch_time_ms"], pa.int64()), 2**40)  # beyond int32: needs the widening
        table = table.set_column(table.schema.get_field_index("watch_time_ms"), "watch_time_ms", big)
    return table.cast(history_arrow_schema(config))


def as_version(rows: pa.Table, config: Config) -> pa.Table:
    """Rows as the current schema must return them: columns they predate null, widened ones cast."""
    schema = history_arrow_schema(config)
    columns = [
        rows[f.name].cast(f.type) if f.name in rows.schema.names else pa.nulls(rows.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def ordered(rows: pa.Table, names: list[str]) -> list[dict]:
    return rows.select(names).sort_by([(k, "ascending") for k in (*KEY_COLUMNS, "source_partition")]).to_pylist()


def publish(history, config: Config, window: int, rows: pa.Table) -> None:
    publish_window(history, config, BASE_WINDOW + window, rows)


def test_columns_added_widened_and_retired_keep_old_runs_readable_and_merge(tmp_path: Path, monkeypatch) -> None:
    warehouse = tmp_path / "warehouse"
    v1, v2, v3 = (config_of(warehouse, v) for v in (1, 2, 3))
    history, _ = history_tables(v1)
    old = [rows_of(v1, 0, 400, 1, heavy=9_000), rows_of(v1, 1, 300, 2)]
    for window, rows in enumerate(old):
        publish(history, v1, window, rows)
    ids_before = {f.name: f.field_id for f in history.refresh().schema().fields}

    # The changed configuration against the old table: one line, every difference, the command.
    with pytest.raises(SchemaError) as refused:
        history_tables(v2)
    message = str(refused.value)
    assert "\n" not in message and "seqlake migrate" in message
    for part in (
        "adds rating (int)",
        "widens watch_time_ms int -> long",
        "widens completion_ratio float -> double",
        "widens position int16 -> int32",
        "retires session_id",
    ):
        assert part in message

    changed = migrate(v2)
    assert {d.table.rsplit(".", 1)[-1] for d in changed} == {"history", "history_detail"}
    assert migrate(v2) == [] and plan_migration(v2) == []  # run again: nothing left to do
    history, detail = history_tables(v2)
    schema = history.schema()
    assert "session_id" not in schema.column_names and "session_id" not in detail.schema().column_names
    # Old columns keep their ids; the new one gets a fresh id, not a position in the configuration.
    assert all(schema.find_field(n).field_id == i for n, i in ids_before.items() if n != "session_id")
    assert schema.find_field("rating").field_id > max(ids_before.values())

    new = rows_of(v2, 2, 300, 3)
    publish(history, v2, 2, new)
    [new_file] = [f.file_path for f in files_of_runs(history.refresh(), {f"w{BASE_WINDOW + 2}"})][:1]
    ids = {f.name: field_id(f) for f in file_schema(new_file)}
    assert ids["rating"] == schema.find_field("rating").field_id
    assert ids["watch_time_ms"] == ids_before["watch_time_ms"]

    expected = pa.concat_tables([as_version(r, v2) for r in old] + [new])
    check_reads(history, v2, expected, monkeypatch)

    # A column retired and added again under its old name is a new column: old files' values stay unseen.
    migrate(v3)
    history, _ = history_tables(v3)
    assert history.schema().find_field("session_id").field_id not in ids_before.values()
    later = rows_of(v3, 3, 200, 4)
    publish(history, v3, 3, later)
    expected = pa.concat_tables([as_version(expected, v3), later])
    check_reads(history, v3, expected, monkeypatch)
    heavy = HistoryReader(history).read_user(HEAVY, ["session_id", "window_id"])
    before_v3 = heavy.filter(pc.less(heavy["window_id"], BASE_WINDOW + 3))
    stored = old[0].filter(pc.equal(old[0]["user_id"], HEAVY))["session_id"]  # in the old files, by the old id
    assert pc.count(stored).as_py() > 0
    assert before_v3.num_rows == 9_000 and pc.count(before_v3["session_id"]).as_py() == 0

    # A merge of every run (old and new schemas) writes the current schema and keeps every row once.
    squeezed = config_of(warehouse, 3, max_runs=1)
    merged = merge_runs_if_needed_duckdb(squeezed)
    assert merged is not None and list(live_runs(history.refresh())) == [merged]
    for path in (f.file_path for f in files_of_runs(history, {merged})):
        assert [f.name for f in file_schema(path)] == history_arrow_schema(v3).names
    check_reads(history, v3, expected, monkeypatch)


def check_reads(history, config: Config, expected: pa.Table, monkeypatch) -> None:
    """Every reader returns `expected` (the current schema), and the table passes fsck."""
    history.refresh()
    paged = []
    read_rows = HistoryReader.read_rows

    def counted(self, *args):
        rows = read_rows(self, *args)
        paged.append(rows is not None)
        return rows

    monkeypatch.setattr(HistoryReader, "read_rows", counted)
    names = history_arrow_schema(config).names
    with lake_cursor() as con:
        scanned = con.execute("SELECT * FROM iceberg_scan(?)", [history.metadata_location]).to_arrow_table()
    assert ordered(scanned, names) == ordered(expected, names)
    with open_session(config, quiet=True) as session:  # `seqlake sql`: the verified scan, file by file's projection
        verified = session.con.execute("SELECT * FROM history").to_arrow_table()
    assert verified.schema.names == scanned.schema.names  # the table's column order, as iceberg_scan gives it
    assert ordered(verified, names) == ordered(expected, names)
    assert history.scan().to_arrow().num_rows == expected.num_rows
    for reader in (HistoryReader(history), CachedHistoryReader(history)):
        users = pc.unique(expected["user_id"]).to_pylist()
        found = pa.concat_tables(reader.read_users(users).values())
        assert ordered(found, names) == ordered(expected, names)
        # Top-K by pages: the heavy user's old run is long enough to be read page by page.
        columns = ["rating", "watch_time_ms", "event_ts"]
        top = reader.read_user(HEAVY, selection=Selection(columns=tuple(columns), top_k=20))
        heavy = expected.filter(pc.equal(expected["user_id"], HEAVY)).sort_by([("event_ts", "ascending")])
        assert top.to_pylist() == heavy.select(columns).slice(heavy.num_rows - 20).to_pylist()
    assert any(paged)  # the Top-K was read by pages
    fsck_table(history)


def test_changes_no_migration_can_make_are_refused_before_anything_changes(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    v1 = config_of(warehouse, 1)
    history, _ = history_tables(v1)
    publish(history, v1, 0, rows_of(v1, 0, 50, 1))
    before = history.refresh().metadata_location
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(warehouse), "catalog_uri": None}
    data["layout"] = {**data["layout"], "bucket_count": 2}
    narrowed = yaml.safe_load(yaml.safe_dump(data))
    narrowed["feature_groups"]["engagement"]["columns"]["author_id"]["type"] = "int32"
    narrowed["feature_groups"]["engagement"]["columns"]["rating"] = {"type": "int32", "merge": "max"}
    retyped = yaml.safe_load(yaml.safe_dump(data))
    retyped["feature_groups"]["purchase"]["columns"]["currency"] = {"type": "int32", "merge": "last"}
    no_group = yaml.safe_load(yaml.safe_dump(data))
    del no_group["feature_groups"]["search"]
    no_group["tenants"]["ranking"]["feature_groups"] = ["engagement", "purchase"]
    for changed, says in (
        (narrowed, "author_id is long in the table but int configured, which is no widening"),
        (retyped, "currency is string in the table but int configured"),
        (no_group, "feature group search is in the table but not configured"),
    ):
        config = parse_config(changed, "changed")
        with pytest.raises(SchemaError, match="seqlake cannot migrate this") as refused:
            migrate(config)
        assert says in str(refused.value) and "\n" not in str(refused.value)
        with pytest.raises(SchemaError, match=says):
            history_tables(config)
    # Nothing was applied, not even the column the narrowed configuration also adds.
    assert history.refresh().metadata_location == before


def dummy_row(schema: pa.Schema) -> dict:
    """One row of a training-table schema with every required value set (what it holds is not read)."""
    values: dict[pa.DataType, object] = {
        pa.string(): "r",
        pa.int64(): 1,
        pa.int32(): 1,
        pa.bool_(): False,
        pa.binary(): b"x",
    }
    row: dict[str, object] = {}
    for f in schema:
        if pa.types.is_list(f.type):
            row[f.name] = [] if f.name != "feature_groups" else ["engagement"]
        elif pa.types.is_map(f.type):
            row[f.name] = [(0, 1)]
        elif pa.types.is_timestamp(f.type):
            row[f.name] = datetime(2026, 1, 5, tzinfo=UTC)
        else:
            row[f.name] = values.get(f.type)
    return row


def test_a_tenant_widens_with_its_column_but_a_new_column_set_is_a_new_tenant(tmp_path: Path) -> None:
    from seqlake.pipelines.training.sequence import Tenant
    from seqlake.pipelines.training.tables import create_bucketed_table, training_schema, training_table_name

    warehouse = tmp_path / "warehouse"
    v1, v2 = config_of(warehouse, 1), config_of(warehouse, 2)
    history_tables(v1)
    for name in ("retrieval", "ranking"):
        tenant = Tenant(v1, name)
        schema = training_schema(tenant)
        create_bucketed_table(v1, training_table_name(tenant), schema).append(
            pa.Table.from_pylist([dummy_row(schema)], schema=schema)
        )
    # Ranking reads every column: version 2 changes its column set while it holds captures.
    with pytest.raises(SchemaError, match="training_ranking: adds recent_rating .*holds captures") as refused:
        migrate(v2)
    assert "seqlake cannot migrate this" in str(refused.value)
    with pytest.raises(SchemaError, match="training_ranking: adds recent_rating"):
        create_bucketed_table(v2, "training_ranking", training_schema(Tenant(v2, "ranking")))

    # Ranking keeps its old columns (listed); retrieval's watch_time_ms widens with history's.
    data = v2.model_dump()
    data["tenants"]["ranking"]["columns"] = list(Tenant(v1, "ranking").columns)
    del data["tenants"]["ranking"]["columns"][data["tenants"]["ranking"]["columns"].index("session_id")]
    kept = Config.model_validate(data)
    # Retiring session_id still changes ranking's columns: refused as well.
    with pytest.raises(SchemaError, match="training_ranking: .*retires recent_session_id.*holds captures"):
        migrate(kept)
    data["tenants"].pop("ranking")
    only_retrieval = Config.model_validate(data)
    changed = {d.table.rsplit(".", 1)[-1]: d for d in migrate(only_retrieval)}
    assert changed["training_retrieval"].widened == ("recent_watch_time_ms list<int> -> list<long>",)
    retrieval = Tenant(only_retrieval, "retrieval")
    table = create_bucketed_table(only_retrieval, "training_retrieval", training_schema(retrieval))
    assert table.scan().to_arrow().num_rows == 1
    assert str(table.schema().find_field("recent_watch_time_ms").field_type) == "list<long>"
    # A training row captured after the widening, beside the old one: the samples job reads both.
    from seqlake.pipelines.training.rebuild.duckdb import pointer_batches
    from seqlake.tableformat.io import PlainFileSystem

    schema = training_schema(retrieval)
    row = dummy_row(schema) | {"recent_watch_time_ms": [BIG_WATCH]}
    table.append(pa.Table.from_pylist([row], schema=schema))
    [batch] = list(pointer_batches(table.refresh(), PlainFileSystem(), 1000))
    assert batch.schema.field("recent_watch_time_ms").type == pa.list_(pa.int64())
    assert sorted(batch["recent_watch_time_ms"].to_pylist()) == [[], [BIG_WATCH]]


def test_a_table_older_than_last_event_ts_migrates_and_reads_it_as_null(tmp_path: Path) -> None:
    """`last_event_ts` came to the format after its first tables: one made before it is told to
    migrate, the migration adds the column, old rows read it as null and new runs write it."""
    config = config_of(tmp_path / "warehouse", 1)
    history, _ = history_tables(config)
    publish(history, config, 0, rows_of(config, 0, 200, seed=1))
    with history.update_schema() as update:  # the table as it was before the column
        update.delete_column("last_event_ts")
    with pytest.raises(SchemaError, match="last_event_ts.*seqlake migrate"):
        history_tables(config)
    assert [d.added for d in migrate(config) if d.added] == [("last_event_ts (timestamptz)",)]
    history, _ = history_tables(config)
    assert history.schema().find_field("last_event_ts").optional
    merged = rows_of(config, 1, 100, seed=2)  # rows of two events each, the second a second later
    later = pc.add(merged["event_ts"], pa.scalar(1_000_000, pa.duration("us")))
    merged = merged.set_column(merged.schema.get_field_index("last_event_ts"), "last_event_ts", later)
    counts = pa.array(np.full(100, 2, np.int32))
    publish(history, config, 1, merged.set_column(merged.schema.get_field_index("event_count"), "event_count", counts))
    rows = history.refresh().scan(selected_fields=("window_id", "event_ts", "last_event_ts")).to_arrow()
    old = rows.filter(pc.equal(rows["window_id"], BASE_WINDOW))
    new = rows.filter(pc.equal(rows["window_id"], BASE_WINDOW + 1))
    assert old.num_rows == 200 and old["last_event_ts"].null_count == 200
    assert new.num_rows == 100 and new["last_event_ts"].null_count == 0
    assert fsck_table(history).rows == 300
