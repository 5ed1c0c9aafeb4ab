"""Check every invariant of the history table; exit 1 with a precise message on the first broken file."""

from __future__ import annotations

import argparse
import sys

from pipelines.landing import landing_paths
from pipelines.publication_check import publication_findings
from seqlake.catalog import load_existing_table, table_identifier
from seqlake.config import load_config
from tableformat.fsck import FsckError, fsck_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlake fsck", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--table", default="history", help="history table name (default: history)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="metadata and footers only: skip re-reading rows (order, checksum)",
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    table = load_existing_table(config, args.table)
    identifier = table_identifier(config, args.table)
    try:
        report = fsck_table(table, full=not args.quick)
    except FsckError as error:
        print(f"seqlake fsck: BROKEN: {error}", file=sys.stderr)
        return 1
    if args.table == "history":
        findings = publication_findings(table, landing_paths(config))
        for finding in findings:
            print(f"seqlake fsck: BROKEN: {identifier}: {finding}", file=sys.stderr)
        if findings:
            return 1
    print(
        f"{identifier}: OK: {report.runs} runs, {report.files} files, {report.rows:,} rows, "
        f"{report.bytes / 2**20:,.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
