"""Ingest: raw source records to the landing tier. `plan` holds what both engines share; `spark` and `duckdb` run it."""
