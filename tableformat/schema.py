"""The history table's schema, key, sort order and partitioning, derived from the configuration.

A history row is one aggregated interaction: all events of one (user, feature group, item) that
arrived in one processing window, merged by the declared operators. Its key is
(user_id, feature_group, event_ts, lsn): `event_ts` is the first event time of the merged events and
`lsn` the largest LSN among them, i.e. the moment the row's value became known.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform

from seqlake.config import Config
from seqlake.events import ARROW_TYPES

FORMAT_VERSION = "1"
KEY_COLUMNS = ("user_id", "feature_group", "event_ts", "lsn")
# The order rows are stored in: the key, then the source partition (LSNs count per partition, so
# two partitions may give one user equal keys; the partition makes the order total).
STORAGE_ORDER = (*KEY_COLUMNS, "source_partition")
TIMESTAMP_US = pa.timestamp("us", tz="UTC")
FIELD_ID = b"PARQUET:field_id"

# Bookkeeping every history row carries besides its key and the feature-group columns.
BOOKKEEPING = [
    pa.field("min_lsn", pa.int64(), nullable=False),  # smallest LSN merged into the row
    pa.field("source_partition", pa.int32(), nullable=False),
    pa.field("event_count", pa.int32(), nullable=False),  # events merged into the row
    pa.field("window_id", pa.int64(), nullable=False),  # processing window that published it
]


def with_field_ids(fields: list[pa.Field] | pa.Schema) -> pa.Schema:
    # Field ids in the Parquet files let every Iceberg reader resolve columns by id, not by name.
    return pa.schema([f.with_metadata({FIELD_ID: str(i).encode()}) for i, f in enumerate(fields, start=1)])


def history_arrow_schema(config: Config) -> pa.Schema:
    """Arrow schema of history files, with Iceberg field ids, in storage order."""
    fields = [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("feature_group", pa.string(), nullable=False),
        pa.field("event_ts", TIMESTAMP_US, nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        *BOOKKEEPING,
    ]
    fields += [pa.field(name, ARROW_TYPES[kind]) for name, kind in config.column_types().items()]
    return with_field_ids(fields)


def history_iceberg_schema(config: Config) -> Schema:
    return pyarrow_to_schema(history_arrow_schema(config))


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
