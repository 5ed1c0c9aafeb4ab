"""The history table's schema, key, sort order and partitioning, derived from its spec (tableformat.spec).

A history row is one aggregated interaction: all events of one (user, feature group, item) that
arrived in one processing window, merged by the declared operators. Its key is
(user_id, feature_group, event_ts, lsn): `event_ts` is the first event time of the merged events and
`lsn` the largest LSN among them, i.e. the moment the row's value became known. `last_event_ts` is
the latest event time merged in: a row holds only events of [event_ts, last_event_ts]. A row of one
event leaves it null (it is its `event_ts`; most rows are, and a null costs nothing to store).
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    TimestamptzType,
)

from seqlake.core.arrow_types import ARROW_TYPES
from seqlake.core.errors import SchemaError
from seqlake.tableformat.evolution import FIELD_ID, table_declared_types, with_ids_from
from seqlake.tableformat.spec import HistorySpec

FORMAT_VERSION = "1"
KEY_COLUMNS = ("user_id", "feature_group", "event_ts", "lsn")
# The order rows are stored in: the key, then the source partition (LSNs count per partition, so
# two partitions may give one user equal keys; the partition makes the order total).
STORAGE_ORDER = (*KEY_COLUMNS, "source_partition")
TIMESTAMP_US = pa.timestamp("us", tz="UTC")
ICEBERG_TO_ARROW = (
    (BooleanType, pa.bool_()),
    (IntegerType, pa.int32()),
    (LongType, pa.int64()),
    (FloatType, pa.float32()),
    (DoubleType, pa.float64()),
    (StringType, pa.string()),
    (BinaryType, pa.binary()),
    (TimestamptzType, TIMESTAMP_US),
)

# Bookkeeping every history row carries besides its key and the feature-group columns.
BOOKKEEPING = [
    # Latest event time merged into the row, written for rows of more than one event (null: the
    # row's event_ts). Tables older than the column read null for every row (`ADDED_BOOKKEEPING`;
    # `latest_event_micros` reads both).
    pa.field("last_event_ts", TIMESTAMP_US),
    pa.field("min_lsn", pa.int64(), nullable=False),  # smallest LSN merged into the row
    pa.field("source_partition", pa.int32(), nullable=False),
    pa.field("event_count", pa.int32(), nullable=False),  # events merged into the row
    pa.field("window_id", pa.int64(), nullable=False),  # processing window that published it
]

# Bookkeeping columns added to the format after its first tables: a migration adds them to an older
# table (`seqlake migrate`), whose files then read them as null (see `latest_event_micros`).
ADDED_BOOKKEEPING = ("last_event_ts",)


def with_field_ids(fields: list[pa.Field] | pa.Schema) -> pa.Schema:
    # Field ids in the Parquet files let every Iceberg reader resolve columns by id, not by name.
    return pa.schema([f.with_metadata({FIELD_ID: str(i).encode()}) for i, f in enumerate(fields, start=1)])


def history_arrow_schema(config: HistorySpec, table_schema: Schema | None = None) -> pa.Schema:
    """Arrow schema of history files, with Iceberg field ids, in storage order. Files of an existing
    table take its field ids (`table_schema`): after schema evolution, positions in the configuration
    no longer give them."""
    fields = [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("feature_group", pa.string(), nullable=False),
        pa.field("event_ts", TIMESTAMP_US, nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        *BOOKKEEPING,
    ]
    fields += [pa.field(name, ARROW_TYPES[kind]) for name, kind in config.column_types().items()]
    schema = with_field_ids(fields)
    return schema if table_schema is None else with_ids_from(schema, table_schema)


def history_iceberg_schema(config: HistorySpec) -> Schema:
    return pyarrow_to_schema(history_arrow_schema(config))


def history_read_schema(table: Table) -> tuple[pa.Schema, frozenset[str]]:
    """The current columns of a history table as readers return them (ids and Arrow types), and the
    columns whose declared width is unknown (`seqlake.tableformat.evolution.projection`'s `loose`)."""
    declared = table_declared_types(table.metadata.properties)
    fields = []
    for f in table.schema().fields:
        kind = ARROW_TYPES[declared[f.name]] if f.name in declared else arrow_type(f.field_type)
        fields.append(pa.field(f.name, kind, nullable=not f.required, metadata={FIELD_ID: str(f.field_id).encode()}))
    return pa.schema(fields), frozenset(f.name for f in table.schema().fields if f.name not in declared)


def table_arrow_schema(schema: Schema) -> tuple[pa.Schema, frozenset[str]]:
    """A table's current columns in Arrow with their field ids, every column `loose` (a file's own
    type is kept where it is the same Iceberg type): for tables written by pyiceberg and Spark."""
    fields = [
        pa.field(f.name, arrow_type(f.field_type), not f.required, {FIELD_ID: str(f.field_id).encode()})
        for f in schema.fields
    ]
    return pa.schema(fields), frozenset(f.name for f in schema.fields)


def arrow_type(kind: IcebergType) -> pa.DataType:
    """The Arrow type seqlake writes for an Iceberg type (plain strings, microseconds; lists and maps
    of those)."""
    if isinstance(kind, ListType):
        return pa.list_(arrow_type(kind.element_type))
    if isinstance(kind, MapType):
        return pa.map_(arrow_type(kind.key_type), arrow_type(kind.value_type))
    for iceberg, arrow in ICEBERG_TO_ARROW:
        if isinstance(kind, iceberg):
            return arrow
    raise SchemaError(f"no Arrow type for the Iceberg type {kind}")


def history_partition_spec(schema: Schema, bucket_count: int) -> PartitionSpec:
    """`bucket(N, user_id)`: a user's rows of every run live in the same bucket."""
    return PartitionSpec(
        PartitionField(
            source_id=schema.find_field("user_id").field_id,
            field_id=1000,
            transform=BucketTransform(bucket_count),
            name="user_id_bucket",
        )
    )


def history_sort_order(schema: Schema) -> SortOrder:
    return SortOrder(
        *[
            SortField(
                source_id=schema.find_field(name).field_id,
                transform=IdentityTransform(),
                direction=SortDirection.ASC,
                null_order=NullOrder.NULLS_FIRST,
            )
            for name in KEY_COLUMNS
        ]
    )
