"""Write the deterministic synthetic event stream as a file of raw source records.

Each record is (source_partition, lsn, arrival_ts, payload JSON), in arrival order, as a source
partition such as a Kafka topic would deliver it. The same seed and configuration write the same
bytes. OUT ends in .parquet or .jsonl.
"""

from __future__ import annotations

from pathlib import Path

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast
from seqlake.core.output import emit
from seqlake.core.progress import Progress

FORMATS = (".parquet", ".jsonl")


@click.command("generate", help=__doc__)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output file (.parquet or .jsonl).")
@click.option("--seed", type=IntegerAtLeast(0), help="Override generator.seed.")
@click.option("--users", type=IntegerAtLeast(1), help="Override generator.users.")
@click.option("--windows", type=IntegerAtLeast(1), help="Override generator.windows.")
@common_options
def command(out: str, seed: int | None, users: int | None, windows: int | None) -> None:
    path = Path(out)
    if path.suffix not in FORMATS:
        raise click.BadParameter(f"{out!r}: the file name must end in .parquet or .jsonl", param_hint="--out")
    from seqlake.pipelines.demo.generator import EventGenerator

    config = load_cli_config()
    overrides = {k: v for k, v in (("seed", seed), ("users", users), ("windows", windows)) if v is not None}
    spec = config.generator.model_validate({**config.generator.model_dump(), **overrides})
    generator = EventGenerator(config, spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    progress = Progress("generate", rows_unit="records", show_bytes=True)
    write_records(generator, path, progress)
    seconds = progress.done(f"-> {path}")
    stats = generator.stats
    document = {
        "out": str(path),
        "bytes": path.stat().st_size,
        "records": stats.records,
        "events": stats.events,
        "users": stats.users,
        "late": stats.late,
        "after_their_window": stats.very_late,
        "duplicates": stats.duplicates,
        "malformed": dict(sorted(stats.malformed.items())),
        "seconds": round(seconds, 3),
    }
    emit(
        document,
        f"{stats.records:,} records: {stats.events:,} events of {stats.users:,} users, "
        f"{stats.late:,} late, {stats.very_late:,} after their window, "
        f"{stats.duplicates:,} duplicates, {sum(stats.malformed.values()):,} malformed -> {path}",
    )


def write_records(generator, path: Path, progress: Progress) -> None:
    """Stream the generator's record batches into `path` (Parquet, or one JSON object per line)."""
    import json

    import pyarrow.parquet as pq

    from seqlake.core.events import RAW_SCHEMA

    if path.suffix == ".jsonl":
        with path.open("w") as sink:
            for batch in generator.batches():
                for row in batch.to_pylist():
                    row["arrival_ts"] = row["arrival_ts"].isoformat()
                    sink.write(json.dumps(row, separators=(",", ":")) + "\n")
                progress.add(rows=batch.num_rows, nbytes=batch.nbytes)
        return
    with pq.ParquetWriter(path, RAW_SCHEMA, compression="zstd") as writer:
        for batch in generator.batches():
            writer.write_batch(batch)
            progress.add(rows=batch.num_rows, nbytes=batch.nbytes)


main = job_main(command)

if __name__ == "__main__":
    script_main("generate")
