"""Window-close aggregation, defined once as SQL and run on Spark or DuckDB.

The SQL is generated in Spark's dialect from the configuration (feature groups, columns, merge
operators) and transpiled to DuckDB with sqlglot, so both engines run the same definition.
Identifiers come from the validated configuration only (see seqlake.config.Identifier).
"""

from __future__ import annotations

from typing import Literal

import sqlglot

from seqlake.config import Config
from seqlake.operators import get_operator

Dialect = Literal["spark", "duckdb"]

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


def _transpile(sql: str, dialect: Dialect) -> str:
    if dialect == "spark":
        return sql
    return sqlglot.transpile(sql, read="spark", write=dialect, pretty=True)[0]


def dedupe_sql(source: str, dialect: Dialect = "spark") -> str:
    """Keep the first arrival of each event id (retransmissions carry the same id, a later LSN)."""
    sql = f"""
    SELECT * EXCEPT (_arrival_rank) FROM (
      SELECT *, row_number() OVER (PARTITION BY event_id ORDER BY source_partition, lsn) AS _arrival_rank
      FROM {source}
    ) WHERE _arrival_rank = 1"""
    if dialect == "duckdb":
        # DuckDB spells EXCEPT as EXCLUDE; sqlglot rewrites it.
        return _transpile(sql, dialect)
    return sql


def aggregation_sql(config: Config, source: str, dialect: Dialect = "spark") -> str:
    """Aggregate deduplicated events of one window into history rows (history column order)."""
    item_key = (
        "CASE feature_group "
        + " ".join(
            f"WHEN '{group}' THEN CAST({spec.item_column} AS STRING)" for group, spec in config.feature_groups.items()
        )
        + " END"
    )
    owners: dict[str, list[str]] = {}
    for group, spec in config.feature_groups.items():
        for column in spec.columns:
            owners.setdefault(column, []).append(group)
    columns = []
    for column, kind in config.column_types().items():
        # The operator of the first group declaring the column; a column's rows in other groups
        # stay NULL (count would otherwise turn them into 0).
        group = owners[column][0]
        operator = get_operator(config.feature_groups[group].columns[column].merge)
        groups = ", ".join(f"'{g}'" for g in owners[column])
        aggregate = operator.sql.format(col=column)
        columns.append(
            f"CAST(CASE WHEN feature_group IN ({groups}) THEN {aggregate} END AS {SPARK_TYPES[kind]}) AS {column}"
        )
    sql = f"""
    SELECT
      user_id,
      feature_group,
      min(event_ts) AS event_ts,
      max(lsn) AS lsn,
      min(lsn) AS min_lsn,
      source_partition,
      CAST(count(*) AS INT) AS event_count,
      max(window_id) AS window_id,
      {("," + chr(10) + "      ").join(columns)}
    FROM {source}
    GROUP BY user_id, feature_group, source_partition, {item_key}"""
    return _transpile(sql, dialect)
