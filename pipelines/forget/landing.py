"""Forget's step on the landing tier (Delta): the users' events, and quarantined records whose payload
names one of them, on either engine, side by side.

A quarantined record's users are read from its raw payload by forget's one rule
(`seqlake.core.payload.named_user_ids`: the same two regular expressions, and try-casts that give null,
never an error, for a run of digits beyond a BIGINT), so forget, fsck and the reference agree.

- Spark: the records found, then Delta's own MERGE through Delta's own writer (`delta-spark`).
- In-process: DuckDB reads the tables (`delta_scan`); delta-rs merges.

Either way the delete is a MERGE on the records' (source partition, LSN) from a staged table of those
keys (`_delete_records`): the Delta log's commit info keeps the merge's predicate, which names no user
(a `DELETE WHERE user_id IN (...)` would keep the ids in clear in the log for as long as it lives).

A table without the users' rows gets no commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from seqlake.core.payload import DIGIT_RUN, USER_ID_VALUE
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.landing.delta_writer import check_writable_in_process, open_table
from seqlake.pipelines.landing.tables import LandingPaths, LandingTier, is_delta_table
from seqlake.pipelines.maintenance.steps import StepReport
from seqlake.tableformat.io import engine_location

FORGET_STEP = "forget"


def _targets(paths: LandingPaths) -> list[tuple[str, str, bool]]:
    """(report target, table URI, whether it holds quarantined raw records) of each landing table."""
    return [("landing/events", paths.events, False), ("landing/quarantine", paths.quarantine, True)]


# -- in-process: DuckDB reads, delta-rs deletes ------------------------------------------------------------


def user_rows_in_landing(con, uri: str, users: pa.Array, quarantine: bool) -> pa.Table:
    """(user_id, lsn, source_partition) of the rows of `users` in one landing table, on a DuckDB
    connection with the delta extension: events by id, quarantined records by the users their payload
    names (one row per user named)."""
    con.register("_forgotten_users", pa.table({"user_id": users}))
    if not quarantine:
        return con.execute(
            "SELECT user_id, lsn, source_partition FROM delta_scan(?) "
            "WHERE user_id IN (SELECT user_id FROM _forgotten_users)",
            [engine_location(uri)],
        ).to_arrow_table()
    return con.execute(
        "WITH named AS (SELECT lsn, source_partition, unnest(flatten(list_transform("
        "regexp_extract_all(payload, ?, 1), v -> regexp_extract_all(v, ?)))) AS digits FROM delta_scan(?)) "
        "SELECT DISTINCT TRY_CAST(digits AS BIGINT) AS user_id, lsn, source_partition FROM named "
        "WHERE TRY_CAST(digits AS BIGINT) IN (SELECT user_id FROM _forgotten_users)",
        [USER_ID_VALUE, DIGIT_RUN, engine_location(uri)],
    ).to_arrow_table()


def _held_in_process(uri: str, users: list[int], quarantine: bool) -> pa.Table:
    """The rows of `users` in the table at `uri`, as `user_rows_in_landing` gives them."""
    with lake_cursor() as con:
        return user_rows_in_landing(con, uri, pa.array(users, pa.int64()), quarantine)


def _records(held: pa.Table) -> set[tuple[int, int]]:
    """The raw records `held` lists, as (source partition, LSN): a quarantined record names a user once."""
    return set(zip(held["source_partition"].to_pylist(), held["lsn"].to_pylist(), strict=True))


KEYS = pa.schema(
    [pa.field("source_partition", pa.int32(), nullable=False), pa.field("lsn", pa.int64(), nullable=False)]
)
MERGE_ON = "t.source_partition = s.source_partition AND t.lsn = s.lsn"


def _keys(records: set[tuple[int, int]]) -> pa.Table:
    ordered = sorted(records)
    return pa.table(
        {"source_partition": [int(p) for p, _ in ordered], "lsn": [int(lsn) for _, lsn in ordered]}, schema=KEYS
    )


def _delete_records(table, records: set[tuple[int, int]]) -> None:
    """Delete these raw records (source partition, LSN) from a delta-rs table: one MERGE from the staged keys."""
    table.merge(_keys(records), MERGE_ON, source_alias="s", target_alias="t").when_matched_delete().execute()


def _forget_in_process(paths: LandingPaths, users: list[int]) -> list[StepReport]:
    reports = []
    for target, uri, quarantine in _targets(paths):
        report = StepReport(FORGET_STEP, target, unit="rows")
        reports.append(report)
        table = open_table(uri)
        if table is None:
            report.notes.append("no table")
            continue
        held = _held_in_process(uri, users, quarantine)
        if not held.num_rows:
            continue
        check_writable_in_process(table, uri)  # delta-rs rewrites the files holding them
        records = _records(held)
        report.removed = len(records) if quarantine else held.num_rows
        _delete_records(table, records)
    return reports


# -- Spark: Delta's own DELETE ----------------------------------------------------------------------------


def names_users(users: Sequence[int]):
    """A Spark condition on a quarantined record: its raw payload names one of the users, as
    `seqlake.core.payload.named_user_ids` reads it."""
    from pyspark.sql import functions as F

    values = F.regexp_extract_all(F.col("payload"), F.lit(USER_ID_VALUE), F.lit(1))
    digits = F.flatten(F.transform(values, lambda value: F.regexp_extract_all(value, F.lit(DIGIT_RUN), F.lit(0))))
    return F.exists(digits, lambda run: run.try_cast("bigint").isin(list(users)))


def _spark_condition(users: list[int], quarantine: bool):
    from pyspark.sql import functions as F

    return names_users(users) if quarantine else F.col("user_id").isin(users)


def _forget_on_spark(spark, paths: LandingPaths, users: list[int]) -> list[StepReport]:
    from delta.tables import DeltaTable

    reports = []
    for target, uri, quarantine in _targets(paths):
        report = StepReport(FORGET_STEP, target, unit="rows")
        reports.append(report)
        if not is_delta_table(uri):
            report.notes.append("no table")
            continue
        condition = _spark_condition(users, quarantine)
        found = spark.read.format("delta").load(uri).where(condition).select("source_partition", "lsn")
        if quarantine:
            found = found.distinct()
        keys = found.collect()
        report.removed = len(keys)
        if keys:
            staged = spark.createDataFrame([(int(r[0]), int(r[1])) for r in keys], "source_partition int, lsn bigint")
            merge = DeltaTable.forPath(spark, uri).alias("t").merge(staged.alias("s"), MERGE_ON)
            merge.whenMatchedDelete().execute()
    return reports


# -- either engine ----------------------------------------------------------------------------------------


def forget_landing(tier: LandingTier, users: list[int]) -> list[StepReport]:
    """Delete the users' landing events and the quarantined records naming them, one commit per table
    that holds any; a report per table (records removed)."""
    if tier.spark is not None:
        return _forget_on_spark(tier.spark, tier.paths, users)
    return _forget_in_process(tier.paths, users)


def landing_rows(tier: LandingTier, users: list[int]) -> int:
    """Records of the users in the landing tier: their events, and quarantined records naming them."""
    total = 0
    for _, uri, quarantine in _targets(tier.paths):
        if not is_delta_table(uri):
            continue
        if tier.spark is not None:
            total += tier.spark.read.format("delta").load(uri).where(_spark_condition(users, quarantine)).count()
        else:
            held = _held_in_process(uri, users, quarantine)
            total += len(_records(held)) if quarantine else held.num_rows
    return total
