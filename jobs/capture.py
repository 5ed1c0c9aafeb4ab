"""Capture your own requests against the online view now: each gets its pointer and fragment in
`training_<tenant>` (created when needed), which `seqlake samples` then rebuilds and verifies.

FILE is CSV or Parquet with one row per request: `request_id`, `user_id` and `request_ts` (ISO 8601,
UTC unless it names a zone), and optionally `label_click` (true/false, default false),
`label_dwell_ms` (default 0), `surface` (default empty) and `hour_of_day` (default: the request's
hour). A request id the table already holds is left out, so running the command again appends
nothing twice.

Capture is for live requests: one older than an event the view already holds of its user, or than
the view's newest arrival by more than `training.capture_tolerance_seconds`, would see its future,
and the command refuses the file, naming how many. Past labels and requests are backfilled
(`seqlake backfill --labels FILE --ts-column request_ts`); `--replay` captures them anyway, for a
live log replayed in real time (their training rows record `replayed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.core.errors import ImportDataError, UnreadableFileError
from seqlake.core.output import emit

if TYPE_CHECKING:
    import pyarrow as pa

REQUIRED = ("request_id", "user_id", "request_ts")
# column -> (the SQL that reads it, the default when the file has no such column)
COLUMNS = {
    "request_id": ("CAST(request_id AS VARCHAR)", None),
    "user_id": ("TRY_CAST(user_id AS BIGINT)", None),
    "request_ts": ("TRY_CAST(request_ts AS TIMESTAMPTZ)", None),
    "label_click": ("TRY_CAST(label_click AS BOOLEAN)", "false"),
    "label_dwell_ms": ("TRY_CAST(label_dwell_ms AS INTEGER)", "0"),
    "surface": ("CAST(surface AS VARCHAR)", "''"),
    "hour_of_day": ("TRY_CAST(hour_of_day AS INTEGER)", "CAST(hour(TRY_CAST(request_ts AS TIMESTAMPTZ)) AS INTEGER)"),
}


def read_requests(path: Path) -> pa.Table:
    """The requests of a CSV or Parquet file as REQUEST_FIELDS columns; a missing column or a value
    that does not read is one line naming the column and how many rows."""
    from seqlake.engines.duckdb_session import connect

    if not path.is_file():
        raise UnreadableFileError(f"--requests {path}: no such file")
    reader = "read_parquet(?)" if path.suffix == ".parquet" else "read_csv(?, header = true)"
    with connect(extensions=()) as con:
        con.execute("SET TimeZone = 'UTC'")
        present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {reader}", [str(path)]).fetchall()}
        missing = [name for name in REQUIRED if name not in present]
        if missing:
            raise ImportDataError(f"--requests {path}: no column {', '.join(missing)} (columns: {sorted(present)})")
        select = ", ".join(
            f"{sql if name in present else default} AS {name}" for name, (sql, default) in COLUMNS.items()
        )
        rows = con.execute(f"SELECT {select} FROM {reader}", [str(path)]).to_arrow_table()
    for name in COLUMNS:
        if rows[name].null_count:
            raise ImportDataError(f"--requests {path}: {rows[name].null_count:,} row(s) with no readable {name}")
    return rows


@click.command("capture", help=__doc__)
@click.option("--requests", "requests_file", required=True, metavar="FILE", help="The requests: CSV or Parquet.")
@click.option("--tenant", required=True, help="The tenant (model) whose sequences are captured.")
@click.option(
    "--fragment-events",
    type=click.IntRange(min=0),
    help="Rows kept in each training row (default: training.fragment_events).",
)
@click.option("--replay", is_flag=True, help="Take requests in the past too: a live log replayed in real time.")
@common_options
def command(requests_file: str, tenant: str, fragment_events: int | None, replay: bool) -> None:
    from seqlake.pipelines.training.capture.append import write_captures
    from seqlake.pipelines.training.sequence import Tenant

    config = load_cli_config()
    if tenant not in config.tenants:
        raise click.BadParameter(f"no tenant {tenant!r} in the configuration (tenants: {', '.join(config.tenants)})")
    profile = Tenant(config, tenant)
    written = write_captures(config, profile, read_requests(Path(requests_file)), fragment_events, replay)
    document = {
        "table": written.table,
        "requests": written.requests,
        "appended": written.appended,
        "already_held": written.already_held,
        "left_out": written.left_out,
        "replayed": written.replayed,
    }
    emit(document, lambda: print(f"{written.summary()}; next: seqlake samples --tenant {tenant}"))


main = job_main(command)

if __name__ == "__main__":
    script_main("capture")
