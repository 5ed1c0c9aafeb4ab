"""Ingest from a Kafka topic: the shared plan (`plan`), and each engine's reader beside it (`duckdb`, `spark`)."""
