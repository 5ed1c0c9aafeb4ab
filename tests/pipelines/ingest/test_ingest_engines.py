"""The two ingest engines: Spark, and in-process (`--engine duckdb`: pyarrow and delta-rs, no JVM).

One small generated stream (duplicates, very late and malformed records) is landed in a raw source
table of its own namespace, a snapshot per window; its first window is published before the
scenarios run, so records arriving in it are redirected to their home window. Each scenario ingests
the stream into a landing tier of its own and compares its content (an order-insensitive digest of
every row of the landing and quarantine tables) with the others: the engines land the same rows, read
each other's idempotency records, append to the tables the other created, and a run killed between the
quarantine and landing commits is completed by the next run of either engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from seqlake.core.config import Config, load_config
from seqlake.core.errors import SeqlakeError
from seqlake.core.windows import window_ids
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb
from seqlake.pipelines.demo.generator import EventGenerator, GeneratorStats
from seqlake.pipelines.faults import KILL_AT_ENV
from seqlake.pipelines.importers import import_file
from seqlake.pipelines.importers.mapping import load_mapping
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.plan import ingest_app_id
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing import delta_writer
from seqlake.pipelines.landing.delta_writer import applied_version
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, landing_paths
from seqlake.pipelines.landing.windows import landed_windows
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.io import engine_location
from tests import forked_commands
from tests.paths import REPO_ROOT
from tests.pipelines.ingest.test_importers import MOVIES, OTTO

RAW = "raw_events"
GENERATOR = {
    "users": 40,
    "heavy_users": 1,
    "max_events": 400,
    "windows": 3,
    "duplicate_share": 0.03,
    "very_late_share": 0.05,  # records arriving in the published first window: redirected
    "malformed_share": 0.02,
}


@dataclass(frozen=True)
class Source:
    config: Config
    stats: GeneratorStats
    snapshots: int
    published: int  # the window published before the scenarios (its late records are redirected)


def source_config(lake_config: Config, namespace: str) -> Config:
    """The tests' warehouse (the shared Spark session's catalog) with a namespace of its own."""
    warehouse = lake_config.warehouse.model_copy(update={"namespace": namespace})
    generator = lake_config.generator.model_copy(update=GENERATOR)
    return lake_config.model_copy(update={"warehouse": warehouse, "generator": generator})


def land_source(config: Config) -> tuple[GeneratorStats, int]:
    """The generated stream in a fresh raw table, one snapshot per window."""
    generator = EventGenerator(config)
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    land_raw_records(raw, generator.batches(), window_seconds=config.layout.window_seconds)
    return generator.stats, len(raw.refresh().snapshots())


@pytest.fixture(scope="module")
def source(lake_config: Config) -> Source:
    config = source_config(lake_config, "ingest_engines")
    stats, snapshots = land_source(config)
    assert snapshots >= 3
    # The first window is published from the namespace's own landing tier: the scenarios then redirect
    # what arrives in it.
    paths = landing_paths(config)
    ingest_source_in_process(config, RAW, paths, max_snapshots=1)
    first = landed_windows(paths).landed[0]
    assert compact_batch_duckdb(config, paths, [first]).published
    return Source(config, stats, snapshots, first)


def tier(config: Config, name: str) -> LandingPaths:
    root = f"{config.warehouse_uri()}/landing_{config.warehouse.namespace}_{name}"
    return LandingPaths(events=f"{root}/events", quarantine=f"{root}/quarantine")


def read_rows(uri: str, schema: pa.Schema) -> pa.Table:
    """Every row of a Delta table as DuckDB's delta extension reads it, in a fixed order."""
    columns = ", ".join(schema.names)
    with lake_cursor() as con:
        rows = con.execute(f"SELECT {columns} FROM delta_scan(?) ORDER BY ALL", [engine_location(uri)]).arrow()
    rows = rows.read_all() if hasattr(rows, "read_all") else rows
    return rows.cast(pa.schema([f.with_nullable(True) for f in schema]))


def digest(rows: pa.Table) -> tuple[int, str]:
    return rows.num_rows, table_checksum(rows, rows.schema)


def content(config: Config, paths: LandingPaths) -> dict[str, tuple[int, str]]:
    """Order-insensitive digests of the landing and quarantine tables' rows."""
    return {
        "events": digest(read_rows(paths.events, landing_schema(config))),
        "quarantine": digest(read_rows(paths.quarantine, QUARANTINE_SCHEMA)),
    }


def spark_content(spark, config: Config, paths: LandingPaths) -> dict[str, tuple[int, str]]:
    """The same digests from the rows as Spark reads them."""
    found = {}
    for name, uri, schema in (
        ("events", paths.events, landing_schema(config)),
        ("quarantine", paths.quarantine, QUARANTINE_SCHEMA),
    ):
        rows = spark.read.format("delta").load(uri).select(*schema.names).toArrow()
        rows = rows.cast(pa.schema([f.with_nullable(True) for f in schema]))
        found[name] = digest(rows.sort_by([(column, "ascending") for column in schema.names]))
    return found


@pytest.fixture(scope="module")
def reference(source: Source) -> dict[str, tuple[int, str]]:
    """One uninterrupted in-process ingest of every snapshot."""
    paths = tier(source.config, "reference")
    result = ingest_source_in_process(source.config, RAW, paths)
    assert (result.batches, result.skipped) == (source.snapshots, 0)
    stats = source.stats
    assert result.landed == stats.events + stats.duplicates
    assert result.quarantined == Counter(stats.malformed)
    found = content(source.config, paths)
    assert found["events"][0] == result.landed and found["quarantine"][0] == sum(stats.malformed.values())
    return found


def test_records_of_the_published_window_land_in_its_home_window(source: Source, reference) -> None:
    paths = tier(source.config, "reference")
    rows = read_rows(paths.events, landing_schema(source.config))
    arrived = window_ids(rows["arrival_ts"], source.config.layout.window_seconds).to_pylist()
    landed = rows["window_id"].to_pylist()
    moved = [(a, w) for a, w in zip(arrived, landed, strict=True) if a != w]
    assert moved and set(moved) == {(source.published, source.published + 1)}


def test_a_replayed_source_lands_nothing_twice_in_process(source: Source, reference) -> None:
    paths = tier(source.config, "reference")
    again = ingest_source_in_process(source.config, RAW, paths)
    assert (again.batches, again.skipped, again.records) == (0, source.snapshots, 0)
    assert content(source.config, paths) == reference


@pytest.mark.spark
def test_both_engines_land_the_same_rows_and_each_reads_the_other(spark, source: Source, reference) -> None:
    config = source.config
    paths = tier(config, "spark")
    result = ingest_source(spark, config, RAW, paths)
    assert (result.batches, result.landed) == (source.snapshots, source.stats.events + source.stats.duplicates)
    assert content(config, paths) == reference
    # Spark reads the in-process engine's tables as it reads its own.
    assert spark_content(spark, config, tier(config, "reference")) == spark_content(spark, config, paths) == reference
    # Each engine skips every snapshot the other applied.
    assert ingest_source_in_process(config, RAW, paths).batches == 0
    assert ingest_source(spark, config, RAW, tier(config, "reference")).batches == 0
    assert content(config, paths) == content(config, tier(config, "reference")) == reference


@pytest.mark.spark
def test_engines_mixed_across_snapshots_land_each_record_once(spark, source: Source, reference) -> None:
    # Spark creates the tables, the in-process engine appends to them, Spark again; the other order is
    # the killed ingest's below (in-process first, Spark completing it).
    config = source.config
    paths = tier(config, "mixed")
    assert ingest_source(spark, config, RAW, paths, max_snapshots=1).batches == 1
    assert ingest_source_in_process(config, RAW, paths, max_snapshots=1).batches == 1
    rest = ingest_source(spark, config, RAW, paths)
    assert (rest.batches, rest.skipped) == (source.snapshots - 2, 2)
    assert content(config, paths) == spark_content(spark, config, paths) == reference
    # A replay on either engine: nothing twice.
    assert ingest_source(spark, config, RAW, paths).batches == ingest_source_in_process(config, RAW, paths).batches == 0
    assert content(config, paths) == reference


def write_config(config: Config, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


def seqlake_ingest(config_file: Path, *args: str, env_extra: dict[str, str] | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")} | (env_extra or {})
    command = [sys.executable, "-m", "seqlake.cli", "ingest", "--config", str(config_file), *args]
    return forked_commands.run(command, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("rerun", ["duckdb", pytest.param("spark", marks=pytest.mark.spark)])
def test_killed_between_the_quarantine_and_landing_commits_then_rerun_lands_each_record_once(
    request, lake_config: Config, tmp_path: Path, rerun: str
) -> None:
    config = source_config(lake_config, f"ingest_killed_{rerun}")
    stats, snapshots = land_source(config)
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    paths = landing_paths(config)
    app_id = ingest_app_id(config, RAW)

    # A real SIGKILL right after the second snapshot's quarantine commit.
    killed = seqlake_ingest(config_file, "--engine", "duckdb", env_extra={KILL_AT_ENV: "ingest_quarantined#2"})
    assert killed.returncode == -9, killed.stderr
    assert (applied_version(paths.quarantine, app_id), applied_version(paths.events, app_id)) == (2, 1)

    if rerun == "spark":
        result = ingest_source(request.getfixturevalue("spark"), config, RAW, paths)
        batches, skipped = result.batches, result.skipped
    else:
        done = seqlake_ingest(config_file, "--engine", "duckdb", "--output", "json")
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        batches, skipped = document["batches"], document["already_ingested"]
    assert (batches, skipped) == (snapshots - 1, 1)
    assert ingest_source_in_process(config, RAW, paths).batches == 0  # and once more: nothing left

    # Exactly the rows of an uninterrupted ingest: nothing lost, nothing twice.
    clean = tier(config, "clean")
    ingest_source_in_process(config, RAW, clean)
    assert content(config, paths) == content(config, clean)
    assert content(config, paths)["events"][0] == stats.events + stats.duplicates
    assert content(config, paths)["quarantine"][0] == sum(stats.malformed.values())


def untracked_files(uri: str) -> set[Path]:
    """Data files under a landing folder that its Delta table (if any) does not reference."""
    folder = Path(engine_location(uri))
    table = delta_writer.open_table(uri)
    tracked = {Path(path) for path in table.file_uris()} if table is not None else set()
    found = {p for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts}
    return found - tracked


@pytest.mark.parametrize("snapshot", [1, pytest.param(2, marks=pytest.mark.spark)])
def test_maintain_removes_the_files_a_killed_in_process_ingest_left_once_past_the_safety_interval(
    lake_config: Config, tmp_path: Path, snapshot: int
) -> None:
    # Killed (SIGKILL) after a quarantine commit, before the landing one. Killed in the first snapshot,
    # no landing table exists yet: its files lie in a folder no Delta log will ever reference (removed
    # by maintain after the orphan safety interval). In the second, they are untracked files of the
    # table (removed by the landing VACUUM; in-process here, Spark's in test_maintenance.py).
    config = source_config(lake_config, f"ingest_leftovers_{snapshot}")
    stats, snapshots = land_source(config)
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    paths = landing_paths(config)
    killed = seqlake_ingest(
        config_file, "--engine", "duckdb", env_extra={KILL_AT_ENV: f"ingest_quarantined#{snapshot}"}
    )
    assert killed.returncode == -9, killed.stderr
    left = untracked_files(paths.events)
    assert left and (delta_writer.open_table(paths.events) is None) == (snapshot == 1)

    def maintain(*args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
        command = [sys.executable, "-m", "seqlake.cli", "maintain", "--config", str(config_file), *args]
        done = forked_commands.run(command, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr

    if snapshot == 1:
        maintain("--skip-landing")  # young: a running ingest may be about to commit them
        assert untracked_files(paths.events) == left
        maintain("--skip-landing", "--orphan-safety-hours", "0")
    else:
        maintain("--landing-retention-hours", "0", "--engine", "duckdb")
    assert not any(path.exists() for path in left)
    # The next run lands every record once, as an ingest never killed does.
    done = seqlake_ingest(config_file, "--engine", "duckdb")
    assert done.returncode == 0, done.stderr
    clean = tier(config, "clean")
    ingest_source_in_process(config, RAW, clean)
    assert content(config, paths) == content(config, clean)
    assert content(config, paths)["events"][0] == stats.events + stats.duplicates
    assert untracked_files(paths.events) == set()


@pytest.mark.spark
def test_a_landing_table_only_spark_can_append_to_is_one_line_naming_the_spark_engine(
    spark, lake_config: Config, tmp_path: Path
) -> None:
    config = source_config(lake_config, "ingest_widened")
    _, snapshots = land_source(config)
    paths = landing_paths(config)
    assert ingest_source(spark, config, RAW, paths, max_snapshots=1).batches == 1
    # Type widening (what a schema migration of the landing tier turns on) is a feature delta-rs does
    # not write.
    spark.sql(f"ALTER TABLE delta.`{paths.events}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    with pytest.raises(SeqlakeError, match="--engine spark"):
        ingest_source_in_process(config, RAW, paths)
    refused = seqlake_ingest(write_config(config, tmp_path / "seqlake.yaml"), "--engine", "duckdb")
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("seqlake ingest: error: the landing table") and "typeWidening" in line
    assert line.endswith("use --engine spark")
    # Nothing was committed; Spark still reads its idempotency record and goes on.
    rest = ingest_source(spark, config, RAW, paths)
    assert (rest.batches, rest.skipped) == (snapshots - 1, 1)


def test_a_base_install_ingests_in_process_without_pyspark(lake_config: Config, tmp_path: Path) -> None:
    config = source_config(lake_config, "ingest_base_install")
    stats, snapshots = land_source(config)
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    code = (
        "import sys; sys.modules.update(pyspark=None, delta=None)\n"
        "from seqlake.cli import main\n"
        f"sys.exit(main(['ingest', '--config', {str(config_file)!r}, '--engine', 'duckdb', '--output', 'json']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["engine"] == "duckdb" and document["batches"] == snapshots
    assert document["landed"] == stats.events + stats.duplicates
    assert document["quarantined"] == dict(sorted(stats.malformed.items()))


def demo_records(config: Config) -> Iterator[pa.RecordBatch]:
    """The stream `seqlake demo` generates (the shipped configuration's generator) over its first two
    windows, without its two users of 10^5 events: every kind of record it makes, malformed ones
    included, in 58K records."""
    demo = load_config(REPO_ROOT / "conf" / "seqlake.yaml").generator
    return EventGenerator(config, demo.model_copy(update={"windows": 2, "heavy_users": 0})).batches()


def sample_records(config: Config, rows: int = 2_000) -> Iterator[pa.RecordBatch]:
    """The first `rows` events of each shipped sample, imported by its shipped mapping, one source
    partition each (MovieTweetings' events span years: each of their windows is a landing partition)."""
    for partition, (sample, path) in enumerate((("otto", OTTO), ("movietweetings", MOVIES))):
        mapping = load_mapping(REPO_ROOT / "conf" / "mappings" / f"{sample}.yaml")
        records = import_file(path, mapping, config, rows, first_partition=partition, allow_out_of_range=True)
        yield next(iter(records))


@pytest.mark.spark
def test_both_engines_land_the_same_rows_on_the_demo_and_the_shipped_samples(spark, lake_config: Config) -> None:
    # One raw table, one snapshot per data set: each engine ingests both in one run.
    config = source_config(lake_config, "engines_on_real_data")
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    for records in (demo_records, sample_records):
        land_raw_records(raw, records(config))
    in_process, on_spark = tier(config, "in_process"), tier(config, "spark")
    landed = ingest_source_in_process(config, RAW, in_process)
    assert landed.batches == 2 and landed.landed > 2_862 and sum(landed.quarantined.values()) > 0
    assert ingest_source(spark, config, RAW, on_spark).landed == landed.landed
    assert content(config, on_spark) == content(config, in_process)
