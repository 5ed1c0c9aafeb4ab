"""Reconstruction on Spark: pointers join history bucket by bucket, without shuffling history.

The training table and history share bucket(N, user_id), so the join is a storage-partitioned join:
each task reads one bucket of pointers and the same bucket of history (`pointer_history_join`; the
plan is checked in tests/pipelines/training/test_late_materialization.py). Visibility, the captured range and the
fragment's first key are filters on the joined rows; the open window's rows are rebuilt from the
detail table's events up to each bound with the same aggregation SQL as compaction. A window
function keeps the newest `length - W` candidates, the fragment's rows are exploded from the
training row, and one grouped aggregation builds the list columns. Each source row's digest (its
four lane values, tableformat/SPEC.md) is computed once, on history before the join, and carried
into the lists, so a sequence's checksum folds integers instead of hashing its rows again.
DataFrame operations and built-in functions only: no Python runs per group or row.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.expressions import And, EqualTo
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.pipelines.training.rebuild.plan import Mode, fragment_columns, quarantine_engine, reason_sql
from seqlake.pipelines.training.sequence import ORDER_KEYS, Tenant
from seqlake.pipelines.training.sequence_digest import (
    lanes_checksum_sql,
    lanes_of_pieces_sql,
    row_pieces_sql,
    string_digest_sql,
)
from seqlake.pipelines.training.tables import (
    FRAGMENT,
    QUARANTINE,
    QUARANTINE_SCHEMA,
    SEQUENCE,
    create_bucketed_table,
    may_hold,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.tableformat.forgets import read_point, remove_missed
from seqlake.tableformat.frontier import spark_covered

RESULT_FIELDS = [
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("reason", pa.string()),  # null when ok
    pa.field("actual_checksum", pa.string(), nullable=False),
    pa.field("expected_checksum", pa.string(), nullable=False),
    pa.field("actual_length", pa.int32(), nullable=False),
    pa.field("expected_length", pa.int32(), nullable=False),
]
# Pointer columns each candidate row carries into the filters and the rank.
KEY_COLUMNS = ("user_id", "request_id")
LANES = ("_l0", "_l1", "_l2", "_l3")  # a row's digest, the four lane values of its pieces


def result_schema(tenant: Tenant) -> pa.Schema:
    return pa.schema(list(sequence_table_schema(tenant)) + RESULT_FIELDS)


def candidate_columns(tenant: Tenant) -> list[str]:
    return list(dict.fromkeys([*tenant.model_columns, *ORDER_KEYS]))


def history_frame(spark: SparkSession, config: Config) -> DataFrame:
    """The history table in Spark, read by Iceberg's (vectorized) reader."""
    return spark.read.table(spark_name(config, HISTORY))


def with_row_lanes(frame: DataFrame, tenant: Tenant) -> DataFrame:
    """`frame` (holding the model columns) with each row's digest in LANES: strings hashed once,
    then the pieces, then the lanes (each step a projection: nothing is computed twice)."""
    strings = [f.name for f in tenant.schema if pa.types.is_string(f.type)]
    digests = {c: f"_h_{c}" for c in strings}
    hashed = frame.select("*", *(F.expr(string_digest_sql(c, "spark")).alias(d) for c, d in digests.items()))
    pieces = row_pieces_sql(tenant.schema, tenant.model_columns, "spark", digests)
    names = [f"_x{j}" for j in range(len(pieces))]
    laid = hashed.select("*", *(F.expr(p).alias(n) for p, n in zip(pieces, names, strict=True)))
    lanes = laid.select("*", *(F.expr(e).alias(n) for e, n in zip(lanes_of_pieces_sql(names), LANES, strict=True)))
    return lanes.drop(*digests.values(), *names)


def _in_range(mode: Mode) -> Column:
    """In the captured range and before the fragment (LSN mode: by the full order key)."""
    inside = F.col("event_ts").between(F.col("range_start"), F.col("range_end"))
    start = F.col("fragment_start_ts")
    if mode == "lsn":
        ts, lsn, partition = F.col("event_ts"), F.col("lsn"), F.col("source_partition")
        same_ts_older = (lsn < F.col("fragment_start_lsn")) | (
            (lsn == F.col("fragment_start_lsn")) & (partition < F.col("fragment_start_partition"))
        )
        older = (ts < start) | ((ts == start) & same_ts_older)
    else:
        older = F.col("event_ts") < start
    return inside & (start.isNull() | older)


def _pointer_keys(spark: SparkSession, config: Config, tenant: Tenant) -> DataFrame:
    return spark.table(spark_name(config, training_table_name(tenant))).select(
        *KEY_COLUMNS,
        "range_start",
        "range_end",
        "open_window",
        "lsn_bound",
        "fragment_start_ts",
        "fragment_start_lsn",
        "fragment_start_partition",
        (F.col("length") - F.size(f"{FRAGMENT}event_ts")).alias("_history_rows"),
    )


def pointer_history_join(
    spark: SparkSession, config: Config, tenant: Tenant, mode: Mode, lanes: bool = False
) -> DataFrame:
    """Each request's candidate history rows (open window excluded in LSN mode), from a storage-
    partitioned join of the training table with history on user_id; `lanes`: with each history
    row's digest (LANES), computed before the join."""
    pointers = _pointer_keys(spark, config, tenant)
    history = (
        history_frame(spark, config)
        .where(F.col("feature_group").isin(list(tenant.feature_groups)))
        .select("user_id", *tenant.read_columns())
    )
    if lanes:
        history = with_row_lanes(history, tenant)
    # A sort-merge join over the shared buckets (never a broadcast of the pointers).
    joined = pointers.hint("merge").join(history, "user_id")
    visible = _in_range(mode)
    if mode == "lsn":
        visible &= (F.col("window_id") != F.col("open_window")) & spark_covered("lsn_bound")
    carried = LANES if lanes else ()
    return joined.where(visible).select(*KEY_COLUMNS, "_history_rows", *candidate_columns(tenant), *carried)


def open_window_as_of_bounds(
    spark: SparkSession, config: Config, tenant: Tenant, pointers: DataFrame, key: str
) -> DataFrame:
    """Each pointer's open window as it stood under its LSN bound: the detail events of its user in
    that window up to the bound of each source partition, aggregated per (`key`, item) with the
    declared merge operators. `pointers` holds `key`, `user_id`, `open_window` and `lsn_bound`."""
    bounds = pointers.select(
        "user_id",
        key,
        F.col("open_window").alias("window_id"),
        F.explode("lsn_bound").alias("source_partition", "bound"),
    )
    events = spark.table(spark_name(config, DETAIL)).where(F.col("feature_group").isin(list(tenant.feature_groups)))
    visible = events.join(bounds, ["user_id", "window_id", "source_partition"]).where(F.col("lsn") <= F.col("bound"))
    view = f"_seqlake_open_window_{tenant.name}_{key.strip('_')}"
    visible.drop("bound").createOrReplaceTempView(view)
    return spark.sql(aggregation_sql(config, view, group_by_extra=(key,)))


def rebuilt_open_window(spark: SparkSession, config: Config, tenant: Tenant) -> DataFrame:
    """The open window's rows of each request's user, as of its bound, from detail events, in the
    captured range and before the fragment."""
    pointers = _pointer_keys(spark, config, tenant)
    rows = open_window_as_of_bounds(spark, config, tenant, pointers, "request_id")
    rows = rows.select(*KEY_COLUMNS, *candidate_columns(tenant)).join(pointers, list(KEY_COLUMNS))
    rows = rows.where(_in_range("lsn")).select(*KEY_COLUMNS, "_history_rows", *candidate_columns(tenant))
    return with_row_lanes(rows, tenant)


def reconstruct_with_spark(spark: SparkSession, config: Config, tenant: Tenant, mode: Mode = "lsn") -> DataFrame:
    """One row per request: the rebuilt sequence as list columns and its verification."""
    model = tenant.model_columns
    candidates = pointer_history_join(spark, config, tenant, mode, lanes=True)
    if mode == "lsn":
        candidates = candidates.unionByName(rebuilt_open_window(spark, config, tenant))
    newest_first = Window.partitionBy(*KEY_COLUMNS).orderBy(*(F.col(k).desc() for k in ORDER_KEYS))
    history = candidates.withColumn("_rank", F.row_number().over(newest_first))
    if mode == "lsn":
        history = history.where(F.col("_rank") <= F.col("_history_rows"))
    history = history.select(*KEY_COLUMNS, F.lit(0).alias("_part"), (-F.col("_rank")).alias("_ord"), *model, *LANES)
    pointers = spark.table(spark_name(config, training_table_name(tenant)))
    fragment = pointers.select(*KEY_COLUMNS, F.posexplode(F.arrays_zip(*fragment_columns(tenant)))).select(
        *KEY_COLUMNS,
        F.lit(1).alias("_part"),
        F.col("pos").alias("_ord"),
        *(F.col("col")[f"{FRAGMENT}{c}"].alias(c) for c in model),
    )
    fragment = with_row_lanes(fragment, tenant)
    # Sorting structs orders by their first fields: part (history, then fragment), then position.
    rows = (
        history.unionByName(fragment)
        .groupBy(*KEY_COLUMNS)
        .agg(F.array_sort(F.collect_list(F.struct("_part", "_ord", *model, *LANES))).alias("_rows"))
    )
    seq = [f"{SEQUENCE}{c}" for c in model]
    lane_lists = [f"_rows_{lane}" for lane in LANES]
    lists = rows.select(
        *KEY_COLUMNS,
        *(F.col("_rows")[c].alias(s) for c, s in zip(model, seq, strict=True)),
        *(F.col("_rows")[lane].alias(name) for lane, name in zip(LANES, lane_lists, strict=True)),
    )
    request_fields = [f for f in sequence_table_schema(tenant) if not f.name.startswith(SEQUENCE)]
    sequences = pointers.select(*(f.name for f in request_fields), "checksum", "length").join(
        lists, list(KEY_COLUMNS), "left"
    )
    # A request with no rows gets empty lists; one projection for every column (a withColumn per
    # column would analyse the growing plan once per column).
    empty = {s: F.array().cast(from_arrow_type(pa.list_(f.type))) for f, s in zip(tenant.schema, seq, strict=True)}
    empty |= {name: F.array().cast("array<bigint>") for name in lane_lists}
    sequences = sequences.withColumns({name: F.coalesce(F.col(name), value) for name, value in empty.items()})
    # The rows' digests came along in the lists: the checksum folds them lane by lane.
    checked = sequences.withColumns(
        {"_actual": F.expr(lanes_checksum_sql(lane_lists, "spark")), "actual_length": F.size(seq[0])}
    )
    reason = F.expr(reason_sql("actual_length", "length", "_actual", "checksum"))
    return checked.select(
        *(f.name for f in request_fields),
        *seq,
        reason.isNull().alias("ok"),
        reason.alias("reason"),
        F.lower(F.hex("_actual")).alias("actual_checksum"),
        F.lower(F.hex("checksum")).alias("expected_checksum"),
        "actual_length",
        F.col("length").alias("expected_length"),
    )


def write_spark_samples(spark: SparkSession, config: Config, tenant: Tenant) -> tuple[int, int]:
    """Rebuild the tenant's samples on Spark (LSN mode); replace samples_<tenant> with the verified
    ones and this tenant's Spark rows of the quarantine table with the failed ones (no commit there
    when it has none of them and none failed). Returns (samples, quarantined).

    Spark's commits are not fenced (`seqlake.tableformat.forgets`): right after each, the rows of users a
    forget removed after the job's read are deleted from what it wrote."""
    history, _ = history_tables(config)
    point = read_point(history)  # before the first read
    results = reconstruct_with_spark(spark, config, tenant, "lsn").persist()
    try:
        counts = {r["ok"]: r["count"] for r in results.groupBy("ok").count().collect()}
        kill_point("samples_rebuilt")
        samples = create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant))  # if new
        names = sequence_table_schema(tenant).names
        results.where("ok").select(*names).writeTo(spark_name(config, samples_table_name(tenant))).overwrite(
            F.lit(True)
        )
        remove_missed(samples, point)
        engine = quarantine_engine("spark", "lsn")
        failed = results.where(~F.col("ok")).select(
            F.lit(tenant.name).alias("tenant"),
            "request_id",
            "user_id",
            F.lit(engine).alias("engine"),
            F.coalesce("reason", F.lit("unverified")).alias("reason"),
            "expected_checksum",
            "actual_checksum",
            "expected_length",
            "actual_length",
        )
        if counts.get(False, 0) or _quarantine_holds(config, tenant.name, engine):
            failed.select(*QUARANTINE_SCHEMA.names).writeTo(spark_name(config, QUARANTINE)).overwrite(
                (F.col("tenant") == tenant.name) & (F.col("engine") == engine)
            )
            quarantine = create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA)
            remove_missed(quarantine, point, And(EqualTo("tenant", tenant.name), EqualTo("engine", engine)))
    finally:
        results.unpersist()
    return counts.get(True, 0), counts.get(False, 0)


def _quarantine_holds(config: Config, tenant: str, engine: str) -> bool:
    """Whether the quarantine table may hold rows of this tenant and engine."""
    from pyiceberg.expressions import And, EqualTo

    table = create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA)
    return may_hold(table, And(EqualTo("tenant", tenant), EqualTo("engine", engine)))
