"""Export one sorted run of the history table as RocksDB SST files for IngestExternalFile.

The files hold disjoint, increasing key ranges (one user never spans two files); ingest them all at
once. manifest.json next to them lists the run, the key and value encodings and every file's range.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import COMMA_LIST, RUN_ID, TABLE_NAME, NumberAbove
from seqlake.core.errors import SeqlakeError
from seqlake.core.output import emit


@click.command("export-sst", help=__doc__)
@click.option("--out", required=True, metavar="DIR", help="Output directory: new or empty, outside the warehouse.")
@click.option("--run", "run_id", type=RUN_ID, help="Run to export (default: the newest live run).")
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="History table name.")
@click.option(
    "--columns", type=COMMA_LIST, help="Value columns, comma-separated (default: every feature-group column)."
)
@click.option(
    "--target-file-mb",
    type=NumberAbove(0, strict=True),
    help="Close an SST file at the first user boundary past this size (default: 64).",
)
@common_options
def command(
    out: str, run_id: str | None, table: str, columns: tuple[str, ...] | None, target_file_mb: float | None
) -> None:
    from seqlake.core.progress import Progress
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.sst_export import DEFAULT_TARGET_FILE_BYTES, check_output_dir, export_run_sst

    config = load_cli_config()
    folder = Path(os.path.realpath(os.path.expanduser(out)))
    if config.warehouse_uri().startswith("file://"):
        warehouse = Path(os.path.realpath(config.warehouse_path()))
        if folder == warehouse or warehouse in folder.parents:
            raise SeqlakeError(f"--out {out}: inside the warehouse ({warehouse}); export to a folder outside it")
    check_output_dir(folder, f"--out {out}")
    history = load_history_table(config, table)
    target = DEFAULT_TARGET_FILE_BYTES if target_file_mb is None else max(1, int(target_file_mb * 2**20))
    progress = Progress("export-sst", rows_unit="keys", show_bytes=True)
    summary = export_run_sst(
        history,
        out,
        run_id=run_id,
        columns=list(columns) if columns else None,
        target_file_bytes=target,
        progress=progress,
    )
    progress.done(f"-> {summary.manifest_path.parent}")
    rate = summary.keys / summary.seconds if summary.seconds > 0 else 0.0
    document = {
        "table": ".".join(history.name()),
        "run_id": summary.run_id,
        "snapshot_id": summary.snapshot_id,
        "files": [f.name for f in summary.files],
        "keys": summary.keys,
        "bytes": summary.bytes,
        "columns": list(summary.columns),
        "seconds": round(summary.seconds, 3),
        "manifest": str(summary.manifest_path),
    }
    emit(
        document,
        f"run {summary.run_id} of {document['table']} (snapshot {summary.snapshot_id}): "
        f"{len(summary.files):,} SST files, {summary.keys:,} keys, {summary.bytes:,} bytes, "
        f"{len(summary.columns)} value columns, {summary.seconds:,.1f}s ({rate:,.0f} keys/s)\n"
        f"manifest: {summary.manifest_path}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("export-sst")
