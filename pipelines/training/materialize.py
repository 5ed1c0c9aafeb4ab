"""Training-sample jobs: rebuild a tenant's samples, write them, measure them against fat rows.

`write_arrow_samples` streams the Arrow path into `samples_<tenant>` (one atomic replacement: a
killed job leaves the previous samples) and its failures into the quarantine table. The time-only
mode writes nothing: its sequences go to scratch Parquet only to be compared with the fat rows.
`fatrow_match` compares rebuilt sequences with the fat-row reference column by column in DuckDB.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo
from pyiceberg.table import Table, Transaction

from pipelines.compaction import history_tables
from pipelines.faults import kill_point
from pipelines.training.arrow_reconstruct import Reconstruction
from pipelines.training.prefetch import PrefetchingIterator
from pipelines.training.reconstruct import Mode
from pipelines.training.sequence import Tenant
from pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    SEQUENCE,
    create_bucketed_table,
    fatrow_table_name,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.catalog import load_existing_table
from seqlake.config import Config
from seqlake.duckdb_session import connect, sql_literal
from tableformat.io import CountingFileSystem

APPEND_BYTES = 128 * 2**20  # samples held in memory before they are written (bounds memory)


@dataclass(frozen=True)
class ReconstructionResult:
    tenant: str
    mode: Mode
    requests: int
    samples: int  # verified
    quarantined: int  # failed verification
    matched: int  # equal to the fat-row reference
    bytes_read: int  # history and detail bytes read

    @property
    def match_rate(self) -> float:
        return self.matched / self.requests if self.requests else 1.0


def _reconstruction(config: Config, tenant: Tenant, mode: Mode, fs: CountingFileSystem) -> Reconstruction:
    history, detail = history_tables(config)
    training = load_existing_table(config, training_table_name(tenant))
    return Reconstruction(config, tenant, training, history, detail, mode=mode, filesystem=fs)


def write_arrow_samples(
    config: Config, tenant: Tenant, mode: Mode = "lsn", compare: bool = True
) -> ReconstructionResult:
    """Rebuild the tenant's samples in-process. LSN mode replaces samples_<tenant> and this tenant's
    Arrow rows of the quarantine table, each in one commit (batches are written as they come, the
    commit at the end); time-only mode writes no table. `compare=False` skips the comparison with the
    fat rows (`matched` is then 0): a benchmark times the job alone."""
    fs = CountingFileSystem()
    reconstruction = _reconstruction(config, tenant, mode, fs)
    engine = f"arrow/{mode}"
    requests = samples = quarantined = 0
    with tempfile.TemporaryDirectory(prefix="seqlake-replay-") as scratch:
        samples_out = quarantine_out = None
        if mode == "lsn":
            samples_out = _replacing(
                create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant)), AlwaysTrue()
            )
            quarantine_out = _replacing(
                create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA),
                And(EqualTo("tenant", tenant.name), EqualTo("engine", engine)),
            )
        pending = _Pending(samples_out)
        with PrefetchingIterator(reconstruction.batches()) as batches:
            for n, batch in enumerate(batches):
                requests += batch.assembled.num_rows
                samples += batch.samples.num_rows
                quarantined += batch.quarantined.num_rows
                if mode == "time":
                    pq.write_table(batch.assembled, Path(scratch) / f"part-{n:06d}.parquet")
                    continue
                pending.add(batch.samples)
                if batch.quarantined.num_rows:
                    quarantine_out.append(batch.quarantined)
        if mode == "lsn":
            pending.flush()
            kill_point("samples_written")
            samples_out.commit_transaction()
            kill_point("samples_committed")
            quarantine_out.commit_transaction()
            matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant)) if compare else 0
        else:
            matched = fatrow_match(config, tenant, parquet_glob=f"{scratch}/*.parquet") if requests else 0
    return ReconstructionResult(tenant.name, mode, requests, samples, quarantined, matched, fs.stats.bytes_read)


class _Pending:
    """Samples gathered up to APPEND_BYTES before one append: each append in a transaction copies
    the transaction's metadata, so many small appends cost more than the data they write."""

    def __init__(self, transaction: Transaction | None) -> None:
        self.transaction = transaction
        self.parts: list[pa.Table] = []
        self.bytes = 0

    def add(self, samples: pa.Table) -> None:
        if samples.num_rows:
            self.parts.append(samples)
            self.bytes += samples.nbytes
        if self.bytes >= APPEND_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.transaction.append(pa.concat_tables(self.parts))
        self.parts, self.bytes = [], 0


def _replacing(table: Table, rows: BooleanExpression) -> Transaction:
    """A transaction that starts by deleting `rows` of `table` (what the job's output replaces)."""
    transaction = table.transaction()
    if table.current_snapshot() is not None:
        with warnings.catch_warnings():  # pyiceberg warns when nothing matches yet
            warnings.simplefilter("ignore", UserWarning)
            transaction.delete(rows)
    return transaction


def fatrow_match(
    config: Config, tenant: Tenant, samples_table: str | None = None, parquet_glob: str | None = None
) -> int:
    """How many fat rows a rebuilt sequence equals exactly (every sequence column, in order)."""
    fatrow = load_existing_table(config, fatrow_table_name(tenant))
    columns = [f.name for f in sequence_table_schema(tenant) if f.name.startswith(SEQUENCE)]
    same = " AND ".join(f"s.{c} IS NOT DISTINCT FROM f.{c}" for c in columns)
    if samples_table is not None:
        samples = load_existing_table(config, samples_table)
        if samples.current_snapshot() is None or fatrow.current_snapshot() is None:
            return 0
        rebuilt = f"iceberg_scan({sql_literal(samples.metadata_location)})"
    else:
        rebuilt = f"read_parquet({sql_literal(parquet_glob)})"
    with connect() as con:
        (matched,) = con.execute(
            f"SELECT count(*) FROM iceberg_scan({sql_literal(fatrow.metadata_location)}) AS f "
            f"JOIN {rebuilt} AS s USING (request_id) WHERE {same}"
        ).fetchone()
    return int(matched)


def read_fatrows_pyarrow(config: Config, tenant: Tenant) -> tuple[float, int]:
    """Seconds to stream every fat row of the tenant with pyiceberg/pyarrow, and the rows read."""
    table = load_existing_table(config, fatrow_table_name(tenant))
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in table.scan().to_arrow_batch_reader())
    return time.perf_counter() - started, rows
