"""Window-close aggregation, defined once as SQL and run on Spark or DuckDB.

The SQL is generated in Spark's dialect from the configuration (feature groups, columns, merge
operators) and transpiled to DuckDB with sqlglot, so both engines run the same definition.
Identifiers come from the validated configuration only (see seqlake.core.config.Identifier).

Semantics both engines share (tests/pipelines/compaction/test_merge_operators.py and
tests/pipelines/compaction/test_aggregation_properties.py hold them to it):
- `CAST` is ANSI: a value that does not fit the column's type (e.g. a `sum` beyond int32) fails the
  job in both engines instead of becoming NULL or wrapping around. Spark runs ANSI SQL by default
  (`spark.sql.ansi.enabled`, true since Spark 4); sqlglot reads Spark's `CAST` as the legacy lenient
  one and would write `TRY_CAST` for DuckDB, so `_transpile` keeps it a `CAST` (an explicit `TRY_CAST`
  in an operator's SQL stays one).
- Each (feature group, column) merges with the operator that group declares, also when several
  groups share a column; a column a row's group does not declare is NULL (so `count` is 0 only for
  the groups that own the column).
"""

from __future__ import annotations

import functools
from typing import Literal

import sqlglot
from sqlglot import exp

from seqlake.core.config import Config
from seqlake.core.operators import get_operator
from seqlake.core.payload import INT_RANGES

Dialect = Literal["spark", "duckdb"]
BOOKKEEPING_OUTPUTS = ("event_ts", "lsn", "last_event_ts", "min_lsn", "source_partition", "event_count", "window_id")

SPARK_TYPES = {
    "bool": "BOOLEAN",
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "string": "STRING",
}


def _ansi_cast(node: exp.Expression) -> exp.Expression:
    # sqlglot parses Spark's CAST as TryCast (legacy non-ANSI Spark returned NULL on a failed cast);
    # an explicit TRY_CAST is parsed with safe=True and is left alone.
    if isinstance(node, exp.TryCast) and not node.args.get("safe"):
        args = {k: v for k, v in node.args.items() if k not in ("safe", "requires_string")}
        return exp.Cast(**args)
    return node


@functools.lru_cache(maxsize=256)  # a fresh read per request batch asks for the same SQL again
def _transpile(sql: str, dialect: Dialect) -> str:
    if dialect == "spark":
        return sql
    tree = sqlglot.parse_one(sql, read="spark").transform(_ansi_cast)
    return tree.sql(dialect=dialect, pretty=True)


def dedupe_sql(source: str, dialect: Dialect = "spark") -> str:
    """Keep the first arrival of each event id (retransmissions carry the same id, a later LSN)."""
    sql = f"""
    SELECT * EXCEPT (_arrival_rank) FROM (
      SELECT *, row_number() OVER (PARTITION BY event_id ORDER BY source_partition, lsn) AS _arrival_rank
      FROM {source}
    ) WHERE _arrival_rank = 1"""
    return _transpile(sql, dialect)  # DuckDB spells EXCEPT as EXCLUDE; sqlglot rewrites it


def first_arrivals_sql(source: str, retention_windows: int, dialect: Dialect = "spark") -> str:
    """Keep each event id's first arrival: the first by (source_partition, lsn) in the earliest window
    it arrived in; a copy in a later window counts again only when more than `retention_windows`
    windows after the previous one (what the detail table can still tell). Over one window this is
    `dedupe_sql`; over several it gives each window what compacting it alone would."""
    sql = f"""
    SELECT * EXCEPT (_previous_window) FROM (
      SELECT *, lag(window_id) OVER (PARTITION BY event_id ORDER BY window_id, source_partition, lsn)
        AS _previous_window
      FROM {source}
    ) WHERE _previous_window IS NULL OR _previous_window < window_id - {int(retention_windows)}"""
    return _transpile(sql, dialect)


# Accumulating operators (sum) aggregate in a type wide enough never to overflow in practice, so the
# result can be checked against the declared type instead of failing the job (see `checked_groups_sql`).
WIDE_TYPES = {"int8": "BIGINT", "int16": "BIGINT", "int32": "BIGINT", "int64": "DECIMAL(38,0)", "float32": "DOUBLE"}
FLOAT_LIMITS = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
OUT_OF_RANGE = "aggregate_out_of_range"


def _item_key(config: Config, prefix: str = "") -> str:
    return (
        f"CASE {prefix}feature_group "
        + " ".join(
            f"WHEN '{group}' THEN CAST({prefix}{spec.item_column} AS STRING)"
            for group, spec in config.feature_groups.items()
        )
        + " END"
    )


def _column_aggregates(config: Config) -> dict[str, str]:
    """Each attribute column's aggregate, before the cast to its declared type."""
    out = {}
    for column, kind in config.column_types().items():
        # Groups declaring the column, bucketed by their operator's aggregate; rows of other groups
        # stay NULL (count would otherwise turn them into 0).
        by_aggregate: dict[str, list[str]] = {}
        for group, spec in config.feature_groups.items():
            if column in spec.columns:
                operator = get_operator(spec.columns[column].merge)
                value = (
                    f"CAST({column} AS {WIDE_TYPES[kind]})" if operator.accumulates and kind in WIDE_TYPES else column
                )
                by_aggregate.setdefault(operator.sql.format(col=value), []).append(group)
        branches = " ".join(
            "WHEN feature_group IN (" + ", ".join(f"'{g}'" for g in groups) + f") THEN {aggregate}"
            for aggregate, groups in by_aggregate.items()
        )
        out[column] = f"CASE {branches} END"
    return out


def _fits(column: str, kind: str) -> str | None:
    """A predicate true when the aggregate `column` fits `kind` (or is NULL); None when it always does.
    Explicit ranges rather than TRY_CAST: the engines disagree on a float cast that overflows."""
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return f"coalesce({column} BETWEEN {low} AND {high}, true)"
    if kind in FLOAT_LIMITS:
        return f"coalesce(abs({column}) <= {FLOAT_LIMITS[kind]!r}, true)"
    return None


def _bookkeeping(selected: str) -> str:
    return f"""{selected}user_id,
      feature_group,
      min(event_ts) AS event_ts,
      max(lsn) AS lsn,
      CASE WHEN count(*) > 1 THEN max(event_ts) END AS last_event_ts,  -- one event: its own event_ts
      min(lsn) AS min_lsn,
      source_partition,
      CAST(count(*) AS INT) AS event_count,
      max(window_id) AS window_id"""


def _grouping(group_by_extra: tuple[str, ...]) -> tuple[str, str]:
    extra = "".join(f"{c}, " for c in group_by_extra)
    # A grouping column that is also an output column (window_id) is not selected twice.
    selected = "".join(f"{c}, " for c in group_by_extra if c not in BOOKKEEPING_OUTPUTS)
    return extra, selected


def aggregation_sql(
    config: Config, source: str, dialect: Dialect = "spark", group_by_extra: tuple[str, ...] = ()
) -> str:
    """Aggregate deduplicated events of one window into history rows (history column order).

    `group_by_extra` names further grouping columns of `source` (e.g. `window_id` to aggregate several
    windows at once, or a request id to rebuild rows per request); they come first in the output.
    An aggregate that does not fit its column's type fails the query (see `checked_groups_sql`)."""
    types = config.column_types()
    columns = [f"CAST({agg} AS {SPARK_TYPES[types[c]]}) AS {c}" for c, agg in _column_aggregates(config).items()]
    extra, selected = _grouping(group_by_extra)
    sql = f"""
    SELECT
      {_bookkeeping(selected)},
      {("," + chr(10) + "      ").join(columns)}
    FROM {source}
    GROUP BY {extra}user_id, feature_group, source_partition, {_item_key(config)}"""
    return _transpile(sql, dialect)


def checked_groups_sql(
    config: Config, source: str, dialect: Dialect = "spark", group_by_extra: tuple[str, ...] = ()
) -> str:
    """`aggregation_sql`'s groups before the cast: their keys (`_item_key` too), bookkeeping, each
    column's aggregate (sums in a wider type), and `_reason`, NULL when every aggregate fits its declared
    type, else `aggregate_out_of_range:<columns>`. Compaction publishes the first kind
    (`fitting_rows_sql`) and quarantines the events of the others (`group_events_sql`)."""
    types = config.column_types()
    aggregates = _column_aggregates(config)
    extra, selected = _grouping(group_by_extra)
    fits = {c: _fits(c, types[c]) for c in aggregates}
    checks = {c: check for c, check in fits.items() if check}
    if checks:
        failing = ", ".join(f"CASE WHEN NOT {check} THEN '{c}' END" for c, check in checks.items())
        reason = (
            f"CASE WHEN {' AND '.join(checks.values())} THEN CAST(NULL AS STRING) "
            f"ELSE concat('{OUT_OF_RANGE}:', concat_ws(',', {failing})) END"
        )
    else:
        reason = "CAST(NULL AS STRING)"
    columns = ("," + chr(10) + "        ").join(f"{agg} AS {c}" for c, agg in aggregates.items())
    sql = f"""
    SELECT *, {reason} AS _reason FROM (
      SELECT
        {_bookkeeping(selected)},
        {_item_key(config)} AS _item_key,
        {columns}
      FROM {source}
      GROUP BY {extra}user_id, feature_group, source_partition, {_item_key(config)}
    )"""
    return _transpile(sql, dialect)


def fitting_rows_sql(
    config: Config, groups: str, dialect: Dialect = "spark", group_by_extra: tuple[str, ...] = ()
) -> str:
    """History rows (as `aggregation_sql` gives them) of the checked `groups` whose aggregates fit."""
    types = config.column_types()
    _, selected = _grouping(group_by_extra)
    bookkeeping = ", ".join(BOOKKEEPING_OUTPUTS)
    columns = ", ".join(f"CAST({c} AS {SPARK_TYPES[kind]}) AS {c}" for c, kind in types.items())
    sql = f"SELECT {selected}user_id, feature_group, {bookkeeping}, {columns} FROM {groups} WHERE _reason IS NULL"
    return _transpile(sql, dialect)


def publishable_rows_sql(
    config: Config, source: str, dialect: Dialect = "spark", group_by_extra: tuple[str, ...] = ()
) -> str:
    """The history rows compaction would publish from `source`: `aggregation_sql`'s rows of the groups
    whose aggregates fit their columns. Groups that do not fit are left out, as compaction leaves them
    out (it quarantines their events), so a fresh read never fails on them."""
    groups = f"({checked_groups_sql(config, source, 'spark', group_by_extra)}) AS _checked_groups"
    return _transpile(fitting_rows_sql(config, groups, "spark", group_by_extra), dialect)


def group_events_sql(
    config: Config,
    events: str,
    groups: str,
    dialect: Dialect = "spark",
    group_by_extra: tuple[str, ...] = (),
    *,
    failed: bool,
) -> str:
    """The events of `events` whose checked group failed, each with the group's `reason`
    (`failed=True`), or the events of the groups that fit (`failed=False`)."""
    keys = [*dict.fromkeys((*group_by_extra, "user_id", "feature_group", "source_partition"))]
    on = " AND ".join([f"e.{k} = g.{k}" for k in keys] + [f"{_item_key(config, 'e.')} <=> g._item_key"])
    failed_groups = f"(SELECT * FROM {groups} WHERE _reason IS NOT NULL)"
    if failed:
        sql = f"SELECT e.*, g._reason AS reason FROM {events} AS e JOIN {failed_groups} AS g ON {on}"
    else:
        sql = f"SELECT e.* FROM {events} AS e LEFT ANTI JOIN {failed_groups} AS g ON {on}"
    return _transpile(sql, dialect)
