"""The warehouse's tables by name: loaded from the configured catalog and checked against the configuration.

A table bucketed by user must be read and written with its own bucket count, and a history table is
one only if it carries seqlake's format property; each check is a one-line error.
"""

from __future__ import annotations

from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import check_warehouse, masked_uri, open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.tableformat.registry import FORMAT_PROPERTY, check_matches_config

HISTORY = "history"  # the history table: sorted runs
DETAIL = "history_detail"  # the detail table: landing rows of published windows, by window


def load_existing_table(config: Config, table: str) -> Table:
    """Load `namespace.table`, or fail with a SchemaError that says which catalog was searched (a
    SetupError, creating nothing, when the warehouse itself is not there)."""
    identifier = table_identifier(config, table)
    check_warehouse(config, f"table {identifier}")
    catalog = open_catalog(config)
    loaded = load_table_if_exists(catalog, identifier)
    if loaded is None:
        raise SchemaError(f"table {identifier} does not exist in the catalog at {masked_uri(config.catalog_uri())}")
    # A table bucketed by user must be read and written with its own bucket count.
    return check_matches_config(loaded, config, check_schema=False)


def load_history_table(config: Config, table: str) -> Table:
    """The named table, if it is a seqlake history table; a one-line SchemaError otherwise."""
    loaded = load_existing_table(config, table)
    if FORMAT_PROPERTY not in loaded.metadata.properties:
        raise SchemaError(
            f"table {'.'.join(loaded.name())} is not a seqlake history table (no {FORMAT_PROPERTY} property); "
            "history tables: history, or one written by seqlake compact"
        )
    return loaded
