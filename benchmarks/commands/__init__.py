"""The `seqlake bench-*` commands (installed with the benchmarks, not with seqlake)."""

# name -> (module[:attribute] defining the click command, one-line summary), as in seqlake.cli.COMMANDS.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench-layout": (
        "benchmarks.commands.layout",
        "measure candidate file layouts side by side (ratios to the default)",
    ),
    "bench-ingest": (
        "benchmarks.commands.ingest",
        "measure ingest cost for users with 0 and 10^5 prior events (ratio)",
    ),
    "bench-reads": ("benchmarks.commands.reads", "measure multi-user reads and the read cache side by side (ratios)"),
    "bench-compact": ("benchmarks.commands.compact", "measure catch-up compaction cost against the number of windows"),
    "bench-merge": (
        "benchmarks.commands.merge",
        "measure write amplification of run merges over many windows (ratios)",
    ),
    "bench-peers": (
        "benchmarks.commands.peers",
        "measure point lookups against RocksDB, DuckDB and Arrow IPC (ratios)",
    ),
    "bench-pipeline": (
        "benchmarks.commands.pipeline",
        "measure import, ingest and compaction on each engine against one DuckDB statement (ratios)",
    ),
    "bench-samples": ("benchmarks.commands.samples", "measure training samples from pointers against fat-row reads"),
    "bench-validate": (
        "benchmarks.commands.validate",
        "measure payload validation record by record against the set-based SQL (records/s)",
    ),
}
