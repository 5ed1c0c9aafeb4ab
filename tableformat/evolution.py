"""Schema evolution: how a table's schema differs from what the configuration asks, and how a data file
written under an older schema reads under the current one.

A feature-group column may be added, widened (int8 -> int16 -> int32 -> int64, float32 -> float64) or
retired (dropped from the configuration) over a table's life. `seqlake migrate` applies such changes
with Iceberg's schema evolution (`update_schema`, one commit per table): new columns get new field
ids, retired ones leave the current schema but stay in old files. Files are never rewritten for it.

Every reader resolves a file's columns by Iceberg field id, as Iceberg engines do (a column retired
and later added again under its old name is a new column: old files read as null for it), casts
widened columns to their current type, and reads columns a file predates as null (`Projection`).
Writers take field ids from the table, never from positions in the configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
)

from seqlake.core.errors import SchemaError, UnknownFieldId

FIELD_ID = b"PARQUET:field_id"
# The declared (Arrow) type of each feature-group column of a history table, a JSON object. Iceberg
# keeps int8, int16 and int32 all as `int`: this property tells which one files are written with, so
# a widening from int16 to int32 is seen and readers return one type for old and new files.
COLUMN_TYPES_PROPERTY = "seqlake.column-types"

# Iceberg's type promotions that seqlake applies (the table's type -> the configured one).
PROMOTIONS = {(IntegerType(), LongType()), (FloatType(), DoubleType())}
# Declared widths within one Iceberg type (`int`): a column may only grow.
INT_WIDTHS = {"int8": 1, "int16": 2, "int32": 3}

MIGRATE_HINT = "run `seqlake migrate` to apply the configuration's schema to the tables"


# -- comparing a table with the configuration ---------------------------------------------------------


@dataclass(frozen=True)
class SchemaDiff:
    """What the configuration asks of one table's schema."""

    table: str
    added: tuple[str, ...] = ()  # configured columns the table lacks, "name (type)"
    widened: tuple[str, ...] = ()  # "name int -> long"
    retired: tuple[str, ...] = ()  # table columns the configuration no longer declares
    refused: tuple[str, ...] = ()  # differences no migration makes (narrowing, another type)
    properties: dict[str, str] = field(default_factory=dict)  # table properties a migration sets

    @property
    def empty(self) -> bool:
        return not (self.added or self.widened or self.retired or self.refused)

    def describe(self) -> str:
        parts = [f"adds {a}" for a in self.added] + [f"widens {w}" for w in self.widened]
        parts += [f"retires {r}" for r in self.retired] + list(self.refused)
        return f"{self.table}: " + ", ".join(parts)


def with_groups(diff: SchemaDiff, table_groups: list[str], groups: list[str], prop: str) -> SchemaDiff:
    """`diff` with the feature groups' change: a new group is a migration (its order recorded in the
    table property `prop`); a group the table holds but the configuration lacks is refused (its rows
    stay in the table's files, and seqlake knows no rule for rows of an unknown group)."""
    dropped = [g for g in table_groups if g not in groups]
    new = [g for g in groups if g not in table_groups]
    refused = diff.refused + tuple(
        f"feature group {g} is in the table but not configured: configure it again (its rows stay in history)"
        for g in dropped
    )
    added = diff.added + tuple(f"feature group {g}" for g in new)
    properties = {**diff.properties, prop: ",".join(groups)} if new else diff.properties
    return replace(diff, added=added, refused=refused, properties=properties)


def promotion(old: IcebergType, new: IcebergType) -> str:
    """`same`, `widen` (a promotion Iceberg allows, list elements included) or `refuse`."""
    if old == new:
        return "same"
    if (old, new) in PROMOTIONS:
        return "widen"
    if isinstance(old, ListType) and isinstance(new, ListType):
        return promotion(old.element_type, new.element_type)
    if isinstance(old, MapType) and isinstance(new, MapType):
        steps = {promotion(old.key_type, new.key_type), promotion(old.value_type, new.value_type)}
        return "refuse" if "refuse" in steps else "widen" if "widen" in steps else "same"
    return "refuse"


def declared_widening(old: str | None, new: str | None) -> str:
    """Between two declared types of one Iceberg type: `same`, `widen` or `refuse`."""
    if old is None or new is None or old == new:
        return "same"
    if old in INT_WIDTHS and new in INT_WIDTHS:
        return "widen" if INT_WIDTHS[new] > INT_WIDTHS[old] else "refuse"
    return "same"


def table_declared_types(properties: dict[str, str]) -> dict[str, str]:
    return json.loads(properties.get(COLUMN_TYPES_PROPERTY, "{}"))


def compare(
    name: str,
    actual: Schema,
    expected: Schema,
    *,
    actual_declared: dict[str, str] | None = None,
    expected_declared: dict[str, str] | None = None,
    fixed: frozenset[str] = frozenset(),
) -> SchemaDiff:
    """The difference between a table's schema (`actual`) and the configuration's (`expected`), by
    column name. `fixed` columns (keys, bookkeeping) may not change at all."""
    have = {f.name: f for f in actual.fields}
    want = {f.name: f for f in expected.fields}
    added: list[str] = []
    widened: list[str] = []
    retired: list[str] = []
    refused: list[str] = []
    for column, wanted in want.items():
        present = have.get(column)
        if present is None:
            (refused if column in fixed else added).append(
                f"{column} (absent in the table, {wanted.field_type} configured)"
                if column in fixed
                else f"{column} ({wanted.field_type})"
            )
            continue
        step = promotion(present.field_type, wanted.field_type)
        declared = (actual_declared or {}).get(column), (expected_declared or {}).get(column)
        if step == "same":
            step = declared_widening(*declared)
            types = tuple(declared) if step != "same" else (present.field_type, wanted.field_type)
        else:
            types = (present.field_type, wanted.field_type)
        if step == "widen" and column not in fixed:
            widened.append(f"{column} {types[0]} -> {types[1]}")
        elif step != "same":
            refused.append(
                f"{column} is {types[0]} in the table but {types[1]} configured, which is no widening "
                "(int8 -> int16 -> int32 -> int64, float32 -> float64): restore its type or add a new column"
            )
    for column in have:
        if column not in want:
            (refused if column in fixed else retired).append(
                f"{column} (in the table, not configured)" if column in fixed else column
            )
    properties = {COLUMN_TYPES_PROPERTY: json.dumps(expected_declared, sort_keys=True)} if expected_declared else {}
    return SchemaDiff(name, tuple(added), tuple(widened), tuple(retired), tuple(refused), properties)


def mismatch_error(diff: SchemaDiff) -> SchemaError:
    """One line: the table, each difference, and the command that migrates it (or why none can)."""
    if diff.refused:
        return SchemaError(f"{diff.describe()}; seqlake cannot migrate this")
    return SchemaError(f"{diff.describe()} (the configuration differs from the table); {MIGRATE_HINT}")


def apply(table, diff: SchemaDiff, expected: Schema) -> None:
    """Evolve `table` to `expected` in one commit: add and widen (`union_by_name`), retire
    (`delete_column`), and record the declared types; refused differences are an error."""
    if diff.refused:
        raise mismatch_error(diff)
    with table.transaction() as tx:
        with tx.update_schema() as update:
            update.union_by_name(expected)
            for column in diff.retired:
                update.delete_column(column)
        if diff.properties:
            tx.set_properties(diff.properties)


# -- reading old files under the current schema -------------------------------------------------------


def field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID)
    return int(raw) if raw is not None else None


def with_ids_from(schema: pa.Schema, table_schema: Schema) -> pa.Schema:
    """`schema` with each top-level field's id taken from the table (by name): files written under an
    evolved schema must carry the table's ids, which positions in the configuration no longer give."""
    ids = {f.name: f.field_id for f in table_schema.fields}
    missing = [f.name for f in schema if f.name not in ids]
    if missing:
        raise SchemaError(f"the table has no columns {missing}; {MIGRATE_HINT}")
    return pa.schema(
        [f.with_metadata({**(f.metadata or {}), FIELD_ID: str(ids[f.name]).encode()}) for f in schema],
        metadata=schema.metadata,
    )


@dataclass(frozen=True)
class Projection:
    """How one file's columns read as the current schema's: `sources` maps each current column to the
    file's column holding it (None: the file predates it); `fields` are the fields returned."""

    sources: dict[str, str | None]
    fields: dict[str, pa.Field]
    identity: bool  # every current column is the file's, same name and type: read as stored
    casts: frozenset[str] = frozenset()  # current columns whose file type is narrower (widened since)

    def file_columns(self, names: list[str]) -> list[str]:
        """The file's columns to read for the current columns `names`."""
        if self.identity:
            return list(names)
        return list(dict.fromkeys(source for n in names if (source := self.sources.get(n)) is not None))

    def apply(self, read: pa.Table, names: list[str], rows: int | None = None) -> pa.Table:
        """`read` (the file's `file_columns(names)`) as the current columns `names`."""
        if self.identity:
            return read
        count = read.num_rows if rows is None else rows
        arrays, fields = [], []
        for name in names:
            target = self.fields[name]
            source = self.sources.get(name)
            if source is None:
                column = pa.chunked_array([pa.nulls(count, target.type)], target.type)
            else:
                column = read.column(source)
                if name in self.casts:
                    column = column.cast(target.type)
            arrays.append(column)
            fields.append(target)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=read.schema.metadata))


def known_field_ids(table) -> frozenset[tuple[str, int]]:
    """Every (column name, field id) pair of any schema the table ever had (top-level columns)."""
    return frozenset((f.name, f.field_id) for schema in table.metadata.schemas for f in schema.fields)


def projection(
    file_schema: pa.Schema,
    target: pa.Schema,
    loose: frozenset[str] = frozenset(),
    known: frozenset[tuple[str, int]] | None = None,
) -> Projection:
    """The projection of a file (its Arrow schema with field ids) onto `target` (the current columns
    with their ids and types). Columns match by field id, or by name where either lacks ids. A `loose`
    column keeps the file's type when it maps to the same Iceberg type as the target's (the declared
    width is unknown: tables from before `seqlake.column-types`).

    Field ids decide which column is which, and the footer's checksums do not cover them: with
    `known` (`known_field_ids`), a file column whose (name, id) the table never had is refused
    (UnknownFieldId), so a damaged id is an error, never a column read as null."""
    if known is not None:
        strange = [f"{f.name}={field_id(f)}" for f in file_schema if (f.name, field_id(f)) not in known]
        if strange and all(field_id(f) is not None for f in file_schema):
            raise UnknownFieldId(f"field ids {strange} were never the table's for those columns")
    by_id = {field_id(f): f for f in file_schema if field_id(f) is not None}
    sources: dict[str, str | None] = {}
    fields: dict[str, pa.Field] = {}
    casts: set[str] = set()
    identity = True
    for wanted in target:
        wanted_id = field_id(wanted)
        found = by_id.get(wanted_id) if wanted_id is not None and by_id else None
        if found is None and (wanted_id is None or not by_id) and wanted.name in file_schema.names:
            found = file_schema.field(wanted.name)
        if found is None:
            sources[wanted.name] = None
            fields[wanted.name] = wanted.with_nullable(True)
            identity = False
            continue
        sources[wanted.name] = found.name
        same = found.type == wanted.type or (wanted.name in loose and _family(found.type) == _family(wanted.type))
        fields[wanted.name] = found.with_name(wanted.name) if same else wanted
        if not same:
            casts.add(wanted.name)
        identity &= same and found.name == wanted.name
    return Projection(sources, fields, identity, frozenset(casts))


def _family(kind: pa.DataType) -> object:
    """The Iceberg type an Arrow type is stored as, by shape: int8..int32 are all `int`, string and
    large_string one `string`, lists and maps by their elements (field names and nullability aside)."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return ("list", _family(kind.value_type))
    if pa.types.is_map(kind):
        return ("map", _family(kind.key_type), _family(kind.item_type))
    if pa.types.is_integer(kind):
        return "long" if kind.bit_width == 64 else "int"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    if pa.types.is_timestamp(kind):
        return ("timestamp", kind.unit, kind.tz is not None)
    return str(kind)


# Casts in SQL, for the engines that read files themselves (DuckDB and Spark merges). Both accept
# these names; column names are configuration identifiers ([a-z][a-z0-9_]*) and need no quoting.
SQL_TYPES = {
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "STRING",
}


def _as_is(name: str) -> str:
    return name


def select_list(
    found: Projection,
    names: list[str],
    *,
    sql_types: Mapping[pa.DataType, str] = SQL_TYPES,
    quote: Callable[[str], str] = _as_is,
) -> list[str]:
    """SQL expressions that read a file's columns as the current `names` (nulls, casts, renames).

    `sql_types` names each Arrow type in the engine's SQL; `quote` spells a column name (as is by
    default: configuration identifiers need no quoting)."""
    expressions = []
    for name in names:
        source, target = found.sources.get(name), found.fields[name]
        if source is None:
            expressions.append(f"CAST(NULL AS {sql_types[target.type]}) AS {quote(name)}")
        elif name in found.casts:
            expressions.append(f"CAST({quote(source)} AS {sql_types[target.type]}) AS {quote(name)}")
        else:
            expressions.append(quote(name) if source == name else f"{quote(source)} AS {quote(name)}")
    return expressions


def file_schema(uri: str) -> pa.Schema:
    """A data file's Arrow schema with its field ids, from its footer."""
    import pyarrow.parquet as pq

    from seqlake.tableformat.io import resolve_uri

    fs, path = resolve_uri(uri)
    with fs.open_input_file(path) as handle:
        return pq.read_schema(handle)


def by_projection(
    uris: list[str], target: pa.Schema, loose: frozenset[str] = frozenset(), known=None
) -> list[tuple[Projection, list[str]]]:
    """The files grouped by how they project onto `target` (files of one schema read together)."""
    groups: dict[tuple, tuple[Projection, list[str]]] = {}
    for uri in uris:
        found = projection(file_schema(uri), target, loose, known)
        key = (found.identity, tuple(found.sources.items()), tuple((n, str(f.type)) for n, f in found.fields.items()))
        groups.setdefault(key, (found, []))[1].append(uri)
    return list(groups.values())
