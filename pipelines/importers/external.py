"""Consume an append-only Delta or Iceberg event table, commit by commit, as raw source records.

Each Delta version or Iceberg snapshot that appends rows becomes one batch (a Spark DataFrame of
``events.RAW_SCHEMA`` records) whose LSNs are ``version << 32 | position``, position being the row's
place among the commit's new rows ordered by (data file path, row position in the file). A re-run
assigns the same LSNs; LSNs grow with the version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.core.errors import ConfigError, ImportDataError
from seqlake.core.events import RAW_SCHEMA
from seqlake.pipelines.importers.mapping import ImportMapping
from seqlake.pipelines.importers.payloads import EventMapper, usable_time

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Bits of the LSN left for the position of a row within one table commit.
POSITION_BITS = 32
# Delta operations that remove rows and re-add only the rest: nothing they add is new.
DELTA_DELETES = frozenset({"DELETE", "TRUNCATE"})

# (per-task counters, file path of each row, the batch) -> position of each row among the commit's rows
PositionFn = Callable[[dict, list[str], pa.RecordBatch], list[int]]


def consume_external_table(
    spark: SparkSession,
    kind: Literal["delta", "iceberg"],
    location_or_name: str,
    mapping: ImportMapping,
    after_version: int | None = None,
    *,
    config: Config | None = None,
    rewrites: Literal["error", "skip"] = "error",
    id_scheme: int = 1,
) -> Iterator[tuple[int, DataFrame]]:
    """Consume an append-only event table commit by commit, after `after_version` (None: from the start).

    Yields (version, DataFrame of RAW_SCHEMA records) for every commit that appends rows, in commit
    order: Delta versions, or Iceberg snapshot sequence numbers along the current branch. LSNs are
    ``version << 32 | position`` (position: place of the row among the commit's new rows ordered by
    data file path and row position in the file), so a re-run assigns the same LSNs and they grow
    with the version. Arrival time is the commit time unless the mapping names an `arrival_time`
    column. Commits that only compact or delete are skipped (history keeps what was appended; a Delta
    DELETE is recognised by its operation); any other commit that rewrites rows (update, merge,
    overwrite, an Iceberg copy-on-write delete) is an error, its rewritten rows not being new events,
    unless `rewrites="skip"` ignores it. With `config`, values are typed for the configured columns
    and the mapping is checked first. Events without an id column get ids of `id_scheme` (`ids`;
    scheme 1 unless told, as before schemes were recorded: pass the raw table's to match its imports).
    """
    if mapping.explode is not None:
        raise ConfigError("invalid import mapping: explode = {...}: not supported when consuming a table")
    if config is not None:
        mapping.check(config)
    if kind == "delta":
        return _consume_delta(spark, location_or_name, mapping, after_version, config, rewrites, id_scheme)
    if kind == "iceberg":
        return _consume_iceberg(spark, location_or_name, mapping, after_version, config, rewrites, id_scheme)
    raise ConfigError(f"kind = {kind!r}: consume a 'delta' or an 'iceberg' table")


# -- Delta ------------------------------------------------------------------------------------------------


def _delta_location(spark: SparkSession, location_or_name: str) -> str:
    if "/" in location_or_name or "://" in location_or_name:
        return location_or_name.rstrip("/")
    row = spark.sql(f"DESCRIBE DETAIL {location_or_name}").first()
    assert row is not None  # DESCRIBE DETAIL answers one row (or raises for a table that is not Delta)
    return str(row["location"]).rstrip("/")


def _delta_commit(spark: SparkSession, location: str, version: int) -> tuple[list[str], int, str, bool]:
    """(names of the data files the commit appends, commit time ms, operation, whether it removes rows)."""
    lines = spark.read.text(f"{location}/_delta_log/{version:020d}.json").collect()
    added: list[str] = []
    removed: set[str] = set()
    commit_ms = 0
    operation = ""
    for line in lines:
        action = json.loads(line[0])
        if "add" in action and action["add"].get("dataChange", True):
            added.append(unquote(action["add"]["path"]))
        elif "remove" in action and action["remove"].get("dataChange", True):
            removed.add(unquote(action["remove"]["path"]))
        elif "commitInfo" in action:
            info = action["commitInfo"]
            commit_ms = int(info.get("inCommitTimestamp") or info.get("timestamp") or 0)
            operation = str(info.get("operation", ""))
    # A deletion vector re-adds the file it removes rows from: that file adds nothing new.
    new = [path for path in added if path not in removed]
    return [path.rsplit("/", 1)[-1] for path in new], commit_ms, operation, bool(removed)


def _consume_delta(
    spark: SparkSession,
    location_or_name: str,
    mapping: ImportMapping,
    after_version: int | None,
    config: Config | None,
    rewrites: str,
    id_scheme: int,
) -> Iterator[tuple[int, DataFrame]]:
    from pyspark.sql import functions as F

    location = _delta_location(spark, location_or_name)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{location}`").select("version").collect()
    versions = sorted(int(r["version"]) for r in history if after_version is None or r["version"] > after_version)
    mapper = EventMapper(mapping, config, id_scheme=id_scheme)
    for version in versions:
        names, commit_ms, operation, removes = _delta_commit(spark, location, version)
        if not names or (removes and operation in DELTA_DELETES):
            continue  # compaction or deletion (files rewritten without the deleted rows): nothing new
        if removes:
            if rewrites == "skip":
                continue
            raise ImportDataError(
                f"{location} version {version} ({operation}) rewrites rows: only appended rows are new events "
                "(rewrites='skip' ignores such commits)"
            )
        rows = (
            spark.read.format("delta")
            .option("versionAsOf", version)
            .load(location)
            .where(F.col("_metadata.file_name").isin(names))
        )
        mapper.check_columns(rows.columns, f"{location} version {version}")
        rows = rows.select(
            *mapper.source_columns(),
            F.col("_metadata.file_path").alias("_seqlake_file"),
            F.col("_metadata.file_block_start").alias("_seqlake_block"),
        )
        # Delta does not expose a row's index in its file; a file split is read in file order, so a
        # row's position is the rows before its split (counted here) plus its place in the split.
        splits = rows.groupBy("_seqlake_file", "_seqlake_block").count().collect()
        offsets = _offsets([((r["_seqlake_file"], r["_seqlake_block"]), r["count"]) for r in splits], version)

        def position(counters: dict, files: list[str], batch: pa.RecordBatch, offsets=offsets) -> list[int]:
            blocks = batch.column("_seqlake_block").to_pylist()
            out = []
            for file, block in zip(files, blocks, strict=True):
                key = (file, block)
                index = counters.get(key, 0)
                counters[key] = index + 1
                out.append(offsets[key] + index)
            return out

        run = _table_mapper(mapping, config, position, version, commit_ms, id_scheme)
        yield version, rows.mapInArrow(run, _spark_raw_schema())


# -- Iceberg ----------------------------------------------------------------------------------------------


def _consume_iceberg(
    spark: SparkSession,
    name: str,
    mapping: ImportMapping,
    after_version: int | None,
    config: Config | None,
    rewrites: str,
    id_scheme: int,
) -> Iterator[tuple[int, DataFrame]]:
    from pyspark.sql import functions as F

    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's context has its gateway
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
    table.refresh()
    snapshots = {}
    iterator = table.snapshots().iterator()
    while iterator.hasNext():
        snapshot = iterator.next()
        snapshots[snapshot.snapshotId()] = snapshot
    current = table.currentSnapshot()
    lineage = []
    while current is not None:
        lineage.append(current)
        parent = current.parentId()
        current = snapshots.get(parent) if parent is not None else None
    lineage.reverse()
    if any(s.sequenceNumber() == 0 for s in lineage):
        raise ImportDataError(f"{name}: a format v1 Iceberg table has no sequence numbers to version commits by")
    mapper = EventMapper(mapping, config, id_scheme=id_scheme)
    for snapshot in lineage:
        version = int(snapshot.sequenceNumber())
        if after_version is not None and version <= after_version:
            continue
        operation = str(snapshot.operation())
        summary = dict(snapshot.summary())
        added = int(summary.get("added-records", "0"))
        if operation in ("replace", "delete") or added == 0:
            continue  # compaction or deletion: nothing new arrived
        if operation != "append":
            if rewrites == "skip":
                continue
            raise ImportDataError(
                f"{name} snapshot {snapshot.snapshotId()} ({operation}) rewrites rows: only appended rows are new "
                "events (rewrites='skip' ignores such commits, e.g. a copy-on-write DELETE)"
            )
        reader = spark.read.format("iceberg")
        parent = snapshot.parentId()
        if parent is None:
            reader = reader.option("snapshot-id", snapshot.snapshotId())
        else:
            reader = reader.option("start-snapshot-id", parent).option("end-snapshot-id", snapshot.snapshotId())
        rows = reader.load(name)
        mapper.check_columns(rows.columns, f"{name} snapshot {snapshot.snapshotId()}")
        rows = rows.select(
            *mapper.source_columns(), F.col("_file").alias("_seqlake_file"), F.col("_pos").alias("_seqlake_pos")
        )
        sizes = rows.groupBy("_seqlake_file").agg((F.max("_seqlake_pos") + 1).alias("n")).collect()
        offsets = _offsets([(r["_seqlake_file"], r["n"]) for r in sizes], version)

        def position(counters: dict, files: list[str], batch: pa.RecordBatch, offsets=offsets) -> list[int]:
            return [offsets[f] + p for f, p in zip(files, batch.column("_seqlake_pos").to_pylist(), strict=True)]

        commit_ms = int(snapshot.timestampMillis())
        run = _table_mapper(mapping, config, position, version, commit_ms, id_scheme)
        yield version, rows.mapInArrow(run, _spark_raw_schema())


# -- shared -----------------------------------------------------------------------------------------------


def _offsets(sizes: Iterable[tuple[Any, int]], version: int) -> dict[Any, int]:
    """Position of the first row of each part (file, or file split) of a commit, parts in key order."""
    offsets: dict[Any, int] = {}
    total = 0
    for key, size in sorted(sizes, key=lambda part: part[0]):
        offsets[key] = total
        total += size
    if total > 1 << POSITION_BITS:
        raise ImportDataError(f"version {version} adds more than 2**{POSITION_BITS} rows: LSNs cannot hold them")
    return offsets


def _spark_raw_schema():
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(RAW_SCHEMA)


def _table_mapper(
    mapping: ImportMapping,
    config: Config | None,
    position: PositionFn,
    version: int,
    commit_ms: int,
    id_scheme: int,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of one commit: rows -> RAW_SCHEMA records with LSNs."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        mapper = EventMapper(mapping, config, id_scheme=id_scheme)
        counters: dict[Any, int] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns = {name: batch.column(name).to_pylist() for name in mapper.source_columns()}
            files = batch.column("_seqlake_file").to_pylist()
            positions = position(counters, files, batch)
            out_parts, out_lsns, out_arrivals, out_payloads = [], [], [], []
            for i in range(batch.num_rows):
                mapped = mapper.event({n: v[i] for n, v in columns.items()}, positions[i])
                if mapped is None:
                    continue
                partition, _, arrival, payload = mapped
                arrival = usable_time(arrival, mapper.events) if mapping.arrival_time else None
                out_parts.append(partition)
                out_lsns.append(version << POSITION_BITS | positions[i])
                out_arrivals.append((arrival if arrival is not None else commit_ms) * 1000)
                out_payloads.append(payload)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(out_parts, pa.int32()),
                    pa.array(out_lsns, pa.int64()),
                    pa.array(out_arrivals, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array(out_payloads, pa.string()),
                ],
                names=RAW_SCHEMA.names,
            )

    return run
