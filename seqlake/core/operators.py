"""Merge operators: how a column's values of one (user, feature group, item) in one window combine.

Each operator is one SQL aggregate in Spark's dialect over `{col}` (the column) and `lsn` (arrival
order); seqlake transpiles it for DuckDB. Users add their own with `register_operator` before the
configuration is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqlake.core.errors import ConfigError


@dataclass(frozen=True)
class MergeOperator:
    name: str
    sql: str  # Spark SQL aggregate over {col}; may use `lsn`
    types: frozenset[str] | None = None  # column types it applies to (None: any)
    # True when the result can leave the input's range (a sum): compaction aggregates such a column
    # in a wider type and quarantines groups whose result does not fit the declared one.
    accumulates: bool = False


INTEGER_TYPES = frozenset({"int8", "int16", "int32", "int64"})
NUMERIC_TYPES = INTEGER_TYPES | {"float32", "float64"}

_OPERATORS: dict[str, MergeOperator] = {}


def register_operator(
    name: str, sql: str, types: frozenset[str] | None = None, *, accumulates: bool = False
) -> MergeOperator:
    """Declare a merge operator, e.g. `register_operator("avg", "avg({col})", NUMERIC_TYPES)`."""
    if "{col}" not in sql:
        raise ConfigError(f"merge operator {name!r}: its SQL must use {{col}}, got {sql!r}")
    operator = MergeOperator(name, sql, types, accumulates)
    _OPERATORS[name] = operator
    return operator


def get_operator(name: str) -> MergeOperator:
    try:
        return _OPERATORS[name]
    except KeyError:
        raise ConfigError(f"unknown merge operator {name!r} (known: {', '.join(sorted(_OPERATORS))})") from None


register_operator("max", "max({col})")
register_operator("min", "min({col})")
register_operator("sum", "sum({col})", NUMERIC_TYPES, accumulates=True)
register_operator("count", "count({col})", INTEGER_TYPES)
register_operator("bit_or", "bit_or({col})", INTEGER_TYPES)
# first/last by arrival: the value of the earliest/latest event that carried one.
register_operator("first", "min_by({col}, lsn) FILTER (WHERE {col} IS NOT NULL)")
register_operator("last", "max_by({col}, lsn) FILTER (WHERE {col} IS NOT NULL)")
