"""Apply the configuration's schema to the warehouse's tables (`seqlake migrate`).

Changing a feature group's columns in the configuration (a column added, widened, retired) changes
the schema of every table whose columns follow it: history, detail, the compaction quarantine, the
landing tier, and each tenant's training, fat-row and samples tables whose columns change with the
tenant's. Opening a table whose schema differs from the configuration is an error that names the
difference and this command; the command evolves each table in one commit (Iceberg's
`update_schema`, Delta's `ALTER TABLE` on Spark), rewrites no data file, and does nothing to a table
that already matches, so it is safe to run again after a kill.

Refused, before any table changes: a narrowing or another type change, a feature group or key column
removed, and a tenant whose captured columns change while its training table holds captures (a
capture's checksum covers the columns it read: a new set of columns is a new tenant). Pointer
columns the format added later (`training.tables.ADDED_POINTER_FIELDS`: `replayed`) are added to
any training table, its old rows reading null.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.compaction.quarantine import COMPACTION_QUARANTINE, compaction_quarantine_schema
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.landing.schema import landing_columns, landing_diff, landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, is_delta_table
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.pipelines.training.sequence import tenants
from seqlake.pipelines.training.tables import (
    ADDED_POINTER_FIELDS,
    fatrow_table_name,
    fixed_columns,
    numbered,
    samples_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.evolution import (
    COLUMN_TYPES_PROPERTY,
    SQL_TYPES,
    SchemaDiff,
    apply,
    compare,
)
from seqlake.tableformat.registry import schema_diff
from seqlake.tableformat.schema import history_iceberg_schema, with_field_ids


@dataclass(frozen=True)
class TableMigration:
    """One table's change: its diff and the schema it evolves to (None for the landing tier)."""

    table: Table | None
    diff: SchemaDiff
    expected: Schema | None = None
    landing: str | None = None  # the Delta table's location, for the landing tier


def _tenant_diff(table: Table, expected: pa.Schema, captures: bool) -> SchemaDiff:
    fixed = fixed_columns(expected)
    diff = compare(".".join(table.name()), table.schema(), pyarrow_to_schema(numbered(expected)), fixed=fixed)
    # Pointer columns the format added later (`ADDED_POINTER_FIELDS`) are added whatever the table
    # holds: old captures read them as null. Only a change of the tenant's columns is refused.
    tenant_added = [a for a in diff.added if a.split(" ", 1)[0] not in ADDED_POINTER_FIELDS]
    if captures and (tenant_added or diff.retired):
        reason = (
            "its tenant's columns changed but it holds captures made with the old ones (a capture's "
            "checksum covers the columns it read): name a new tenant for the new columns, or keep this "
            "tenant's columns as they were"
        )
        diff = replace(diff, refused=(*diff.refused, reason))
    return diff


def _has_rows(table: Table | None) -> bool:
    snapshot = table.current_snapshot() if table is not None else None
    summary = snapshot.summary if snapshot is not None else None
    return bool(summary and int(summary.additional_properties.get("total-records", "0") or 0))


def plan_migration(config: Config, paths: LandingPaths | None = None) -> list[TableMigration]:
    """Every table that differs from the configuration, with what changes (refusals included)."""
    catalog = open_catalog(config)

    def load(name: str) -> Table | None:
        identifier = table_identifier(config, name)
        return load_table_if_exists(catalog, identifier)

    plans: list[TableMigration] = []
    history = load(HISTORY)
    if history is not None:
        diff = schema_diff(history, config)
        if not diff.empty or COLUMN_TYPES_PROPERTY not in history.metadata.properties:
            plans.append(TableMigration(history, diff, history_iceberg_schema(config)))
    for name, schema in (
        (DETAIL, landing_schema(config)),
        (COMPACTION_QUARANTINE, compaction_quarantine_schema(config)),
    ):
        table = load(name)
        if table is not None:
            expected = pyarrow_to_schema(with_field_ids(schema))
            diff = schema_diff(table, config, expected)
            if not diff.empty:
                plans.append(TableMigration(table, diff, expected))
    for tenant in tenants(config):
        training = load(training_table_name(tenant))
        captures = _has_rows(training)
        for name, schema, guarded in (
            (training_table_name(tenant), training_schema(tenant), True),
            (fatrow_table_name(tenant), sequence_table_schema(tenant), True),
            (samples_table_name(tenant), sequence_table_schema(tenant), False),  # replaced by each run
        ):
            table = training if name == training_table_name(tenant) else load(name)
            if table is not None:
                diff = _tenant_diff(table, schema, captures and guarded)
                if not diff.empty:
                    plans.append(TableMigration(table, diff, pyarrow_to_schema(numbered(schema))))
    if paths is not None and is_delta_table(paths.events):
        diff = landing_diff(landing_columns(paths.events), config)
        if not diff.empty:
            plans.append(TableMigration(None, diff, landing=paths.events))
    return plans


def migrate_landing(spark, location: str, config: Config) -> None:
    """Add the configured columns the landing tier lacks and widen the ones it holds narrower
    (Delta type widening); `ALTER TABLE` commits each change once, and a re-run finds it done."""
    diff = landing_diff(landing_columns(location), config)
    if diff.empty:
        return
    target = f"delta.`{location}`"
    kinds = {f.name: SQL_TYPES[f.type] for f in landing_schema(config) if f.type in SQL_TYPES}
    actual = {f.name for f in landing_columns(location)}
    added = [f"{name} {kind}" for name, kind in kinds.items() if name not in actual]
    if added:
        spark.sql(f"ALTER TABLE {target} ADD COLUMNS ({', '.join(added)})")
    for entry in diff.widened:
        name = entry.split(" ", 1)[0]
        spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
        spark.sql(f"ALTER TABLE {target} CHANGE COLUMN {name} TYPE {kinds[name]}")


def migrate(
    config: Config, *, spark=None, paths: LandingPaths | None = None, dry_run: bool = False
) -> list[SchemaDiff]:
    """Evolve every table to the configuration's schema (one commit each); return what changed.

    All refusals are raised before any table changes; the landing tier needs a Spark session when it
    differs (SchemaError otherwise, naming it)."""
    plans = plan_migration(config, paths)
    refused = [p.diff for p in plans if p.diff.refused]
    if refused:
        raise SchemaError("; ".join(f"{d.describe()}" for d in refused) + "; seqlake cannot migrate this")
    landing = [p for p in plans if p.landing is not None]
    if landing and spark is None and not dry_run:
        raise SchemaError(f"{landing[0].diff.describe()}: migrating the landing tier needs Spark")
    if dry_run:
        return [p.diff for p in plans]
    for plan in plans:
        if plan.landing is not None:
            migrate_landing(spark, plan.landing, config)
        else:
            assert plan.expected is not None  # every plan but the landing tier's has its schema
            apply(plan.table, plan.diff, plan.expected)
        kill_point("migrate_committed")
    return [p.diff for p in plans]
