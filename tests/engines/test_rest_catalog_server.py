"""Iceberg's REST catalog server as the tests run it: pyiceberg, DuckDB and Spark reach one table
through it (tests/rest_catalog_server.py)."""

from __future__ import annotations

import secrets

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from seqlake.engines.duckdb_session import connect, sql_literal
from tests.rest_catalog_server import RestCatalogServer

ROWS = pa.table(
    {
        "user_id": pa.array([3, 1, 2, 1], pa.int64()),
        "event": pa.array(["view", "click", "buy", "view"]),
        "lsn": pa.array([10, 11, 12, 13], pa.int64()),
    }
)


def _catalog(server: RestCatalogServer) -> Catalog:
    return load_catalog("rest", **server.properties())


def _table_with_rows(server: RestCatalogServer) -> Table:
    """A new namespace and table through the server, with ROWS appended."""
    catalog = _catalog(server)
    namespace = "ns_" + secrets.token_hex(4)
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", schema=ROWS.schema)
    table.append(ROWS)
    return table


def _sorted(rows: pa.Table) -> pa.Table:
    return rows.sort_by("lsn")


def test_pyiceberg_writes_and_reads_a_table_through_the_rest_catalog(rest_catalog_server, measurement):
    measurement(f"Iceberg REST catalog server start-up: {rest_catalog_server.startup_seconds} s")
    table = _table_with_rows(rest_catalog_server)
    namespace, name = table.name()
    # A second client of the same server sees the namespace, the table and its snapshot.
    again = _catalog(rest_catalog_server)
    assert (namespace,) in again.list_namespaces()
    assert (namespace, name) in again.list_tables(namespace)
    loaded = again.load_table((namespace, name))
    assert loaded.metadata_location == table.metadata_location
    assert loaded.metadata_location.startswith(str(rest_catalog_server.warehouse))
    assert _sorted(loaded.scan().to_arrow()).equals(_sorted(ROWS))


def test_duckdb_reads_the_table_by_attaching_the_rest_catalog_and_by_its_metadata(rest_catalog_server):
    table = _table_with_rows(rest_catalog_server)
    namespace, name = table.name()
    con = connect(extensions=("httpfs", "avro", "iceberg"))
    con.execute(
        f"ATTACH '' AS lake (TYPE iceberg, ENDPOINT {sql_literal(rest_catalog_server.uri)}, AUTHORIZATION_TYPE 'none')"
    )
    attached = con.execute(f'SELECT user_id, event, lsn FROM lake."{namespace}"."{name}" ORDER BY lsn').to_arrow_table()
    assert attached.equals(_sorted(ROWS))
    by_metadata = con.execute(
        "SELECT user_id, event, lsn FROM iceberg_scan(?) ORDER BY lsn", [table.metadata_location]
    ).to_arrow_table()
    assert by_metadata.equals(_sorted(ROWS))


@pytest.mark.spark
def test_spark_reads_the_table_through_the_rest_catalog(spark, rest_catalog_server):
    table = _table_with_rows(rest_catalog_server)
    namespace, name = table.name()
    # A catalog added to the running session: Spark loads a catalog when a query first names it.
    spark.conf.set("spark.sql.catalog.rest_smoke", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.rest_smoke.type", "rest")
    spark.conf.set("spark.sql.catalog.rest_smoke.uri", rest_catalog_server.uri)
    rows = spark.table(f"rest_smoke.{namespace}.{name}").orderBy("lsn").toArrow()
    assert rows.equals(_sorted(ROWS))
