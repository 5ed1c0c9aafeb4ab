"""Write the deterministic synthetic event stream as files of raw source records.

Each record is (source_partition, lsn, arrival_ts, payload JSON), in arrival order, as a source
partition such as a Kafka topic would deliver it. The same seed and configuration write the same bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config
from seqlake.events import RAW_SCHEMA
from seqlake.generator import EventGenerator
from seqlake.progress import Progress


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake generate", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--out", required=True, help="output file (.parquet or .jsonl)")
    parser.add_argument("--seed", type=integer_at_least(0), help="override generator.seed")
    parser.add_argument("--users", type=integer_at_least(1), help="override generator.users")
    parser.add_argument("--windows", type=integer_at_least(1), help="override generator.windows")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    overrides = {k: v for k, v in vars(args).items() if k in ("seed", "users", "windows") and v is not None}
    spec = config.generator.model_validate({**config.generator.model_dump(), **overrides})
    generator = EventGenerator(config, spec)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    progress = Progress("generate")
    if out.suffix == ".jsonl":
        with out.open("w") as sink:
            for batch in generator.batches():
                for row in batch.to_pylist():
                    row["arrival_ts"] = row["arrival_ts"].isoformat()
                    sink.write(json.dumps(row, separators=(",", ":")) + "\n")
                progress.add(rows=batch.num_rows, nbytes=batch.nbytes)
    elif out.suffix == ".parquet":
        with pq.ParquetWriter(out, RAW_SCHEMA, compression="zstd") as writer:
            for batch in generator.batches():
                writer.write_batch(batch)
                progress.add(rows=batch.num_rows, nbytes=batch.nbytes)
    else:
        parser.error(f"--out {args.out!r}: the file name must end in .parquet or .jsonl")
    progress.done(f"-> {out}")
    stats = generator.stats
    print(
        f"{stats.records:,} records: {stats.events:,} events of {stats.users:,} users, "
        f"{stats.late:,} late, {stats.very_late:,} after their window, "
        f"{stats.duplicates:,} duplicates, {sum(stats.malformed.values()):,} malformed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
