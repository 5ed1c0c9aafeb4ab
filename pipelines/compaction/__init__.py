"""Window-close compaction and run merges. `spark` and `duckdb` run a closed window; the rest is shared."""
