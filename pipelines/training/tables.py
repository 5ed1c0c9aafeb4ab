"""The Iceberg tables of late materialization, one set per tenant, all partitioned by bucket(N, user_id)
like history (data affinity: a bucket of pointers joins a bucket of history, in Spark without a shuffle).

- `training_<tenant>`: the normalized training table: labels, small features, the pointer and the
  captured recent fragment of each request.
- `fatrow_<tenant>`: today's alternative and the reference answer: the whole sequence in every row.
- `samples_<tenant>`: reconstructed training samples (the same columns as the fat-row table).
- `samples_quarantine`: reconstructions that failed verification, with the reason; never emitted.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.training.sequence import SEQUENCE_PREFIX, Tenant, list_schema
from seqlake.tableformat.evolution import compare, mismatch_error
from seqlake.tableformat.forgets import inherited
from seqlake.tableformat.frontier import FRONTIER_TYPE
from seqlake.tableformat.schema import FIELD_ID, TIMESTAMP_US, history_partition_spec

FRAGMENT = "recent_"  # prefix of the captured recent fragment's list columns
SEQUENCE = SEQUENCE_PREFIX
QUARANTINE = "samples_quarantine"

REQUEST_FIELDS = [
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("user_id", pa.int64(), nullable=False),
    pa.field("request_ts", TIMESTAMP_US, nullable=False),
    # Labels and small features: what a training row carries besides the sequence.
    pa.field("label_click", pa.bool_(), nullable=False),
    pa.field("label_dwell_ms", pa.int32(), nullable=False),
    pa.field("surface", pa.string(), nullable=False),
    pa.field("hour_of_day", pa.int32(), nullable=False),
]

REQUEST_COLUMNS = tuple(f.name for f in REQUEST_FIELDS)

POINTER_FIELDS = [
    pa.field("feature_groups", pa.list_(pa.string()), nullable=False),
    pa.field("range_start", TIMESTAMP_US),  # event-time range of the sequence, both ends inclusive
    pa.field("range_end", TIMESTAMP_US),
    pa.field("lsn_bound", FRONTIER_TYPE, nullable=False),  # the frontier at capture (tableformat.frontier)
    pa.field("open_window", pa.int64(), nullable=False),  # newest processing window visible at capture
    pa.field("length", pa.int32(), nullable=False),
    pa.field("top_k", pa.int32(), nullable=False),
    pa.field("checksum", pa.binary(), nullable=False),  # of the model columns of the whole sequence
    # The fragment's oldest row, in sequence order: reconstruction takes history rows before it.
    pa.field("fragment_start_ts", TIMESTAMP_US),
    pa.field("fragment_start_lsn", pa.int64()),
    pa.field("fragment_start_partition", pa.int32()),
    # Whether the request was older than the view it was captured from, taken on purpose (`seqlake
    # capture --replay`: a live log replayed); false for live requests, null in rows of tables older
    # than the column.
    pa.field("replayed", pa.bool_()),
]

# Pointer columns added to the format after its first training tables: a migration adds them to an
# older table (`seqlake migrate`, whatever captures it holds), whose rows then read null; readers
# take the table's own columns, so a table without them reads as before.
ADDED_POINTER_FIELDS = ("replayed",)

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("engine", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("expected_checksum", pa.string(), nullable=False),
        pa.field("actual_checksum", pa.string(), nullable=False),
        pa.field("expected_length", pa.int32(), nullable=False),
        pa.field("actual_length", pa.int32(), nullable=False),
    ]
)


def training_schema(tenant: Tenant) -> pa.Schema:
    return pa.schema(REQUEST_FIELDS + POINTER_FIELDS + list_schema(tenant, FRAGMENT))


def sequence_table_schema(tenant: Tenant) -> pa.Schema:
    """Fat rows and reconstructed samples: the request, its labels and features, the whole sequence."""
    return pa.schema(REQUEST_FIELDS + list_schema(tenant, SEQUENCE))


def training_table_name(tenant: Tenant) -> str:
    return f"training_{tenant.name}"


def fatrow_table_name(tenant: Tenant) -> str:
    return f"fatrow_{tenant.name}"


def samples_table_name(tenant: Tenant) -> str:
    return f"samples_{tenant.name}"


def all_table_names(tenants: list[Tenant]) -> list[str]:
    names = [QUARANTINE]
    for tenant in tenants:
        names += [training_table_name(tenant), fatrow_table_name(tenant), samples_table_name(tenant)]
    return names


def create_bucketed_table(config: Config, name: str, schema: pa.Schema, catalog: Catalog | None = None) -> Table:
    """Create `name` partitioned by bucket(N, user_id) unless it exists; return it. An existing table
    whose columns differ from `schema` (the tenant's columns changed in the configuration) is refused
    with the difference and the command that migrates it."""
    catalog = catalog or open_catalog(config)
    identifier = table_identifier(config, name)
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None:
        return check_bucketed_table(existing, schema)
    iceberg_schema = pyarrow_to_schema(numbered(schema))
    history_id = table_identifier(config, "history")
    history = load_table_if_exists(catalog, history_id)
    try:
        return catalog.create_table(
            identifier,
            schema=iceberg_schema,
            partition_spec=history_partition_spec(iceberg_schema, config.layout.bucket_count),
            # A job that read before a finished forget drops its users here too (`seqlake.tableformat.forgets`).
            properties={"write.parquet.compression-codec": "zstd", **inherited(history)},
        )
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def check_bucketed_table(table: Table, schema: pa.Schema) -> Table:
    """`table` if its columns are `schema`'s; else the mismatch error (`fixed_columns`: only the
    sequence and fragment list columns follow the configuration, and a migration adds the pointer
    columns an older table lacks)."""
    diff = compare(
        ".".join(table.name()), table.schema(), pyarrow_to_schema(numbered(schema)), fixed=fixed_columns(schema)
    )
    if not diff.empty:
        raise mismatch_error(diff)
    return table


def fixed_columns(schema: pa.Schema) -> frozenset[str]:
    """The columns of a tenant's table that no migration changes: all but the sequence and fragment
    list columns (which follow the configuration) and the pointer columns the format added later
    (`ADDED_POINTER_FIELDS`, which a migration adds)."""
    return frozenset(
        f.name for f in schema if not f.name.startswith((FRAGMENT, SEQUENCE)) and f.name not in ADDED_POINTER_FIELDS
    )


def numbered(schema: pa.Schema) -> pa.Schema:
    """Field ids on every field, nested ones included (list elements, map keys and values)."""
    ids = itertools.count(1)

    def number(field: pa.Field) -> pa.Field:
        kind = field.type
        if pa.types.is_map(kind):
            kind = pa.map_(number(kind.key_field), number(kind.item_field))
        elif pa.types.is_list(kind):
            kind = pa.list_(number(kind.value_field))
        return field.with_type(kind).with_metadata({FIELD_ID: str(next(ids)).encode()})

    return pa.schema([number(f) for f in schema])


def drop_tables(config: Config, names: list[str]) -> None:
    catalog = open_catalog(config)
    for name in names:
        identifier = table_identifier(config, name)
        if catalog.table_exists(identifier):
            catalog.purge_table(identifier)


def table_bytes(table: Table) -> int:
    """Bytes of the table's live data files (what storing it costs)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    return sum(task.file.file_size_in_bytes for task in table.scan().plan_files())


def may_hold(table: Table, rows) -> bool:
    """Whether `table` may hold rows matching the expression `rows`, by its files' statistics alone."""
    return table.current_snapshot() is not None and any(True for _ in table.scan(row_filter=rows).plan_files())
