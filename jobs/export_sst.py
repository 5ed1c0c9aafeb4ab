"""Export one sorted run of the history table as RocksDB SST files for IngestExternalFile.

The files hold disjoint, increasing key ranges (one user never spans two files); ingest them all at
once. manifest.json next to them lists the run, the key and value encodings and every file's range.
"""

from __future__ import annotations

import argparse
import sys

from seqlake.catalog import load_history_table
from seqlake.cli_args import ArgumentParser, number_above, table_name
from seqlake.config import load_config
from seqlake.progress import Progress
from tableformat.sst_export import DEFAULT_TARGET_FILE_BYTES, export_run_sst


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake export-sst",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--table", default="history", type=table_name, help="history table name (default: history)")
    parser.add_argument("--run", dest="run_id", metavar="RUN_ID", help="run to export (default: newest live run)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (new or empty)")
    parser.add_argument(
        "--columns",
        metavar="A,B,C",
        help="value columns, comma-separated (default: every feature-group column)",
    )
    parser.add_argument(
        "--target-file-mb",
        type=number_above(0, strict=True),
        default=DEFAULT_TARGET_FILE_BYTES / 2**20,
        help="close an SST file at the first user boundary past this size (default: 64)",
    )
    args = parser.parse_args(argv)
    columns = None
    if args.columns is not None:
        columns = [c.strip() for c in args.columns.split(",") if c.strip()]
        if not columns:
            parser.error("--columns names no column")

    config = load_config(args.config)
    table = load_history_table(config, args.table)

    progress = Progress("export-sst")
    summary = export_run_sst(
        table,
        args.out,
        run_id=args.run_id,
        columns=columns,
        target_file_bytes=max(1, int(args.target_file_mb * 2**20)),
        progress=progress,
    )
    progress.done(f"-> {summary.manifest_path.parent}")
    rate = summary.keys / summary.seconds if summary.seconds > 0 else 0.0
    print(
        f"run {summary.run_id} of {table.name()} (snapshot {summary.snapshot_id}): "
        f"{len(summary.files):,} SST files, {summary.keys:,} keys, {summary.bytes:,} bytes, "
        f"{len(summary.columns)} value columns, {summary.seconds:,.1f}s ({rate:,.0f} keys/s)"
    )
    print(f"manifest: {summary.manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
