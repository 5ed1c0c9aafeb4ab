"""The Iceberg catalog every engine shares.

A SQL catalog is pyiceberg's SqlCatalog here and Iceberg's JdbcCatalog in Spark: both speak the same
two tables (`iceberg_tables`, `iceberg_namespace_properties`) in one SQL database, so a table
committed by either engine is visible to the other. A REST catalog (Polaris, Lakekeeper, Unity, Glue's
and S3 Tables' endpoints, Nessie, Iceberg's own server) is pyiceberg's RestCatalog here and Spark's
SparkCatalog with `type=rest`; both commit through the server.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from contextlib import closing, suppress
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, RESTError
from sqlalchemy.exc import SQLAlchemyError

from seqlake.core.config import Config
from seqlake.core.errors import SetupError
from seqlake.core.uris import masked_uri
from seqlake.engines.duckdb_session import object_storage_for
from seqlake.engines.iceberg_writes import enable_iceberg_page_checksums, serialize_manifest_evaluation
from seqlake.engines.storage import S3Settings, check_access, is_s3

log = logging.getLogger(__name__)


def _use_wal(sqlite_uri: str) -> None:
    # In WAL mode readers never block a writer's commit: Spark's JDBC connection may hold a read
    # transaction open while pyiceberg commits, which the default rollback journal turns into
    # "database is locked". The mode is stored in the file, so every later connection inherits it.
    path = sqlite_uri[len("sqlite:///") :]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA journal_mode=WAL")


# Database drivers SQLAlchemy imports by module name -> the package that provides it.
DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "MySQLdb": "mysqlclient"}


def open_catalog(config: Config) -> Catalog:
    """Open (and initialise on first use) the configured catalog with its namespace: the SQL catalog,
    or the REST catalog at `warehouse.catalog_uri`.

    A catalog that cannot be opened (a misspelled or unreachable URI, a missing database driver, a
    damaged SQLite file, a refused credential) is a one-line SetupError naming the URI (password masked).
    """
    uri = config.catalog_uri()
    enable_iceberg_page_checksums()  # every file written through this catalog carries page CRCs
    serialize_manifest_evaluation()  # a commit replacing files finds them in its parent's manifests
    try:
        if config.warehouse_uri().startswith("file://"):
            config.warehouse_path().mkdir(parents=True, exist_ok=True)
        if uri.startswith("sqlite:///"):
            _use_wal(uri)
        properties = {}
        on_s3 = is_s3(config.warehouse_uri())
        if on_s3:
            check_access(config.warehouse_uri())
            properties = S3Settings.from_env().pyiceberg_properties()
        object_storage_for(on_s3)  # a local warehouse opened after an S3 one switches S3 off again
        log.debug("opening the catalog %s (warehouse %s)", masked_uri(uri), config.warehouse_uri())
        if config.warehouse.catalog_type == "rest":
            return _rest_catalog(config, properties)
        catalog = SqlCatalog(config.warehouse.catalog_name, uri=uri, warehouse=config.warehouse_uri(), **properties)
        with suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(config.warehouse.namespace)
    except ModuleNotFoundError as error:
        package = DRIVER_PACKAGES.get(error.name or "", error.name)
        raise SetupError(
            f"catalog {masked_uri(uri)}: its database driver {error.name!r} is not installed (pip install {package})"
        ) from None
    except (SQLAlchemyError, sqlite3.Error, OSError) as error:
        detail = " ".join(str(getattr(error, "orig", None) or error).split())
        detail = detail.split(" (Background on this error")[0]
        raise SetupError(f"cannot open the catalog {masked_uri(uri)}: {_without_secrets(config, detail)}") from None
    except RESTError as error:
        detail = " ".join(str(error).split())
        raise SetupError(
            f"the REST catalog {masked_uri(uri)} refused seqlake: {_without_secrets(config, detail)}"
        ) from None
    return catalog


def _rest_catalog(config: Config, properties: dict[str, str]) -> Catalog:
    """The REST catalog with the namespace, its properties from the configuration and its secrets from
    the environment."""
    from requests.exceptions import RequestException

    uri = config.catalog_uri()
    try:
        catalog = RestCatalog(
            config.warehouse.catalog_name,
            **{**properties, **config.warehouse.catalog_properties, **config.catalog_secrets(), "uri": uri},
        )
        with suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(config.warehouse.namespace)
        return catalog
    except RequestException as error:
        reason = type(error).__name__
        raise SetupError(f"cannot reach the REST catalog {masked_uri(uri)} ({reason})") from None


def _without_secrets(config: Config, text: str) -> str:
    """`text` with the catalog's secrets, and any URI password in it, masked."""
    for secret in config.catalog_secrets().values():
        for part in {secret, *secret.split(":")}:
            if len(part) >= 4:
                text = text.replace(part, "***")
    return masked_uri(text)


def table_identifier(config: Config, table: str) -> str:
    """`namespace.table` for pyiceberg."""
    return f"{config.warehouse.namespace}.{table}"


def spark_name(config: Config, table: str) -> str:
    """`catalog.namespace.table` for Spark SQL."""
    return f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.{table}"


def purge_tables(config: Config, names: tuple[str, ...]) -> None:
    """Drop the named tables of the configured namespace and remove their folders (benchmarks and
    tests that start from nothing); a table that does not exist is skipped."""
    catalog = open_catalog(config)
    for name in names:
        identifier = table_identifier(config, name)
        if catalog.table_exists(identifier):
            location = catalog.load_table(identifier).location()
            catalog.purge_table(identifier)
            shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)


def check_warehouse(config: Config, looking_for: str | None = None) -> None:
    """A SetupError if the configured SQLite catalog (by default in the warehouse folder) does not
    exist: opening it would create an empty catalog there, and every table would then "not exist". A
    shared catalog (PostgreSQL, a REST catalog) is asked as it is: it knows its tables."""
    uri = config.catalog_uri()
    if config.warehouse.catalog_type != "sql" or not uri.startswith("sqlite:///"):
        return
    if Path(uri[len("sqlite:///") :]).is_file():
        return
    if config.warehouse_uri().startswith("file://") and not config.warehouse_path().is_dir():
        missing = f"no warehouse at {config.warehouse_path()}"
    else:
        missing = f"no catalog at {uri[len('sqlite:///') :]}"
    what = f": {looking_for} does not exist" if looking_for else ""
    raise SetupError(
        f"{missing}{what} (run `seqlake demo`, or point SEQLAKE_WAREHOUSE or warehouse.path at a warehouse)"
    )
