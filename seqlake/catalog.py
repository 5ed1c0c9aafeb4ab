"""The Iceberg catalog every engine shares: pyiceberg's SqlCatalog here, Iceberg's JdbcCatalog in Spark.

Both speak the same two tables (`iceberg_tables`, `iceberg_namespace_properties`) in one SQL
database, so a table committed by either engine is visible to the other.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing, suppress
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from pyiceberg.table import Table
from sqlalchemy.exc import SQLAlchemyError

from seqlake.config import Config
from seqlake.errors import SchemaError, SetupError
from seqlake.uris import masked_text, masked_uri


def _use_wal(sqlite_uri: str) -> None:
    # In WAL mode readers never block a writer's commit: Spark's JDBC connection may hold a read
    # transaction open while pyiceberg commits, which the default rollback journal turns into
    # "database is locked". The mode is stored in the file, so every later connection inherits it.
    path = sqlite_uri[len("sqlite:///") :]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA journal_mode=WAL")


def open_catalog(config: Config) -> SqlCatalog:
    """Open (and initialise on first use) the configured SQL catalog with its namespace."""
    if config.warehouse_uri().startswith("file://"):
        config.warehouse_path().mkdir(parents=True, exist_ok=True)
    if config.catalog_uri().startswith("sqlite:///"):
        _use_wal(config.catalog_uri())
    uri = config.catalog_uri()
    try:
        catalog = SqlCatalog(config.warehouse.catalog_name, uri=uri, warehouse=config.warehouse_uri())
        with suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(config.warehouse.namespace)
    except ImportError as error:
        raise SetupError(
            f"the catalog at {masked_uri(uri)} needs a database driver that is not installed ({error.name or error})"
        ) from None
    except (SQLAlchemyError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SetupError(f"cannot open the catalog at {masked_uri(uri)}: {masked_text(first_line, uri)}") from None
    return catalog


def table_identifier(config: Config, table: str) -> str:
    """`namespace.table` for pyiceberg."""
    return f"{config.warehouse.namespace}.{table}"


def spark_name(config: Config, table: str) -> str:
    """`catalog.namespace.table` for Spark SQL."""
    return f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.{table}"


def load_existing_table(config: Config, table: str) -> Table:
    """Load `namespace.table`, or fail with a SchemaError that says which catalog was searched."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, table)
    if not catalog.table_exists(identifier):
        raise SchemaError(f"table {identifier} does not exist in the catalog at {masked_uri(config.catalog_uri())}")
    from tableformat.registry import check_matches_config  # tableformat depends on seqlake, not back

    # A table bucketed by user must be read and written with its own bucket count.
    return check_matches_config(catalog.load_table(identifier), config, check_schema=False)
