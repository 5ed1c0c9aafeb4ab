"""Window-close aggregation, defined once as SQL and run on Spark or DuckDB.

The SQL is generated in Spark's dialect from the configuration (feature groups, columns, merge
operators) and transpiled to DuckDB with sqlglot, so both engines run the same definition.
Identifiers come from the validated configuration only (see seqlake.config.Identifier).

Semantics both engines share (tests/test_merge_operators.py and tests/test_aggregation_properties.py
hold them to it):
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

from typing import Literal

import sqlglot
from sqlglot import exp

from seqlake.config import Config
from seqlake.operators import get_operator

Dialect = Literal["spark", "duckdb"]
BOOKKEEPING_OUTPUTS = ("event_ts", "lsn", "min_lsn", "source_partition", "event_count", "window_id")

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


def aggregation_sql(
    config: Config, source: str, dialect: Dialect = "spark", group_by_extra: tuple[str, ...] = ()
) -> str:
    """Aggregate deduplicated events of one window into history rows (history column order).

    `group_by_extra` names further grouping columns of `source` (e.g. `window_id` to aggregate several
    windows at once, or a request id to rebuild rows per request); they come first in the output."""
    item_key = (
        "CASE feature_group "
        + " ".join(
            f"WHEN '{group}' THEN CAST({spec.item_column} AS STRING)" for group, spec in config.feature_groups.items()
        )
        + " END"
    )
    columns = []
    for column, kind in config.column_types().items():
        # Groups declaring the column, bucketed by their operator's aggregate; rows of other groups
        # stay NULL (count would otherwise turn them into 0).
        by_aggregate: dict[str, list[str]] = {}
        for group, spec in config.feature_groups.items():
            if column in spec.columns:
                aggregate = get_operator(spec.columns[column].merge).sql.format(col=column)
                by_aggregate.setdefault(aggregate, []).append(group)
        branches = " ".join(
            "WHEN feature_group IN (" + ", ".join(f"'{g}'" for g in groups) + f") THEN {aggregate}"
            for aggregate, groups in by_aggregate.items()
        )
        columns.append(f"CAST(CASE {branches} END AS {SPARK_TYPES[kind]}) AS {column}")
    extra = "".join(f"{c}, " for c in group_by_extra)
    # A grouping column that is also an output column (window_id) is not selected twice.
    selected = "".join(f"{c}, " for c in group_by_extra if c not in BOOKKEEPING_OUTPUTS)
    sql = f"""
    SELECT
      {selected}user_id,
      feature_group,
      min(event_ts) AS event_ts,
      max(lsn) AS lsn,
      min(lsn) AS min_lsn,
      source_partition,
      CAST(count(*) AS INT) AS event_count,
      max(window_id) AS window_id,
      {("," + chr(10) + "      ").join(columns)}
    FROM {source}
    GROUP BY {extra}user_id, feature_group, source_partition, {item_key}"""
    return _transpile(sql, dialect)
