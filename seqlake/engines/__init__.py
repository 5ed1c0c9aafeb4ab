"""Engines and stores: the Iceberg catalog, object storage, and DuckDB and Spark sessions. Above core only."""
