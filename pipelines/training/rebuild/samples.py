"""Training-sample jobs: rebuild a tenant's samples, write them, measure them against fat rows.

`write_arrow_samples` streams the Arrow path into `samples_<tenant>` (a data file per batch, one
atomic replacement at the end: a killed job leaves the previous samples) and its failures into the
quarantine table. The time-only
mode writes nothing: its sequences go to scratch Parquet only to be compared with the fat rows.
`fatrow_match` compares rebuilt sequences with the fat-row reference column by column in DuckDB.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, In

from seqlake.core.config import Config
from seqlake.core.errors import ForgetCommitted
from seqlake.engines.duckdb_session import lake_cursor, sql_literal
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.rebuild.bucket_files import BucketFiles
from seqlake.pipelines.training.rebuild.duckdb import Reconstruction
from seqlake.pipelines.training.rebuild.plan import Mode, quarantine_engines
from seqlake.pipelines.training.rebuild.prefetch import PrefetchingIterator
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    SEQUENCE,
    create_bucketed_table,
    fatrow_table_name,
    may_hold,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.tableformat.deletes import nothing_matched_is_fine
from seqlake.tableformat.forgets import ATTEMPTS, ReadPoint, drop_users, fenced_transaction, read_point
from seqlake.tableformat.io import CountingFileSystem


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
    Arrow rows of the quarantine table, each in one commit (each batch's verified samples are written
    as one data file of its bucket while the next batch is rebuilt; the commit at the end); time-only
    mode writes no table. `compare=False` skips the comparison with the fat rows (`matched` is then
    0): a benchmark times the job alone."""
    fs = CountingFileSystem()
    reconstruction = _reconstruction(config, tenant, mode, fs)
    point = read_point(reconstruction.history)  # loaded before the pointers: what the commits check
    requests = samples = quarantined = 0
    with tempfile.TemporaryDirectory(prefix="seqlake-replay-") as scratch:
        samples_out: BucketFiles | None = None
        failures: list[pa.Table] = []
        if mode == "lsn":
            table = create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant))
            samples_out = BucketFiles(table, config.layout.bucket_count)
        with PrefetchingIterator(reconstruction.batches()) as batches, samples_out or nullcontext():
            for n, batch in enumerate(batches):
                requests += batch.assembled.num_rows
                samples += batch.samples.num_rows
                quarantined += batch.quarantined.num_rows
                if mode == "time":
                    pq.write_table(batch.assembled, Path(scratch) / f"part-{n:06d}.parquet")
                    continue
                assert samples_out is not None  # mode "lsn" made it
                samples_out.write(batch.samples)
                if batch.quarantined.num_rows:
                    failures.append(batch.quarantined)
            if mode == "lsn":
                kill_point("samples_written")
                assert samples_out is not None
                samples_out.commit(point, replacing=AlwaysTrue())
        if mode == "lsn":
            kill_point("samples_committed")
            replace_quarantine(config, tenant.name, quarantine_engines("duckdb", mode), failures, point)
            matched = fatrow_match(config, tenant, samples_table=samples_table_name(tenant)) if compare else 0
        else:
            matched = fatrow_match(config, tenant, parquet_glob=f"{scratch}/*.parquet") if requests else 0
    return ReconstructionResult(tenant.name, mode, requests, samples, quarantined, matched, fs.stats.bytes_read)


def replace_quarantine(
    config: Config, tenant: str, engines: list[str], failures: list[pa.Table], point: ReadPoint
) -> None:
    """This tenant's rows of the quarantine table written by `engines` (the engine's name and its former
    names) become `failures`, in one commit; no commit when there is nothing to remove or add. Rows of
    users a forget removed after the job's read (`point`) are left out, the commit fenced on that check
    (`seqlake.tableformat.forgets`)."""
    table = create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA)
    rows = And(EqualTo("tenant", tenant), In("engine", engines))
    for _ in range(ATTEMPTS):
        holds = may_hold(table.refresh(), rows)
        if not failures and not holds:
            return
        transaction, missed = fenced_transaction(table, point)
        if holds:
            with nothing_matched_is_fine():
                transaction.delete(rows)
        failed = drop_users(pa.concat_tables(failures), missed) if failures else None
        if failed is not None and failed.num_rows:
            transaction.append(failed)
        try:
            transaction.commit_transaction()
            return
        except CommitFailedException:
            continue
    raise ForgetCommitted(f"{QUARANTINE}: forgets kept committing; run the samples job again")


def fatrow_match(
    config: Config,
    tenant: Tenant,
    samples_table: str | None = None,
    parquet_glob: str | None = None,
    as_of: str | None = None,
) -> int:
    """How many fat rows a rebuilt sequence equals exactly (every sequence column, in order): the
    sequences of `samples_table` (as of the metadata file `as_of`, if given: samples a later job has
    replaced since) or of the Parquet files of `parquet_glob`."""
    fatrow = load_existing_table(config, fatrow_table_name(tenant))
    columns = [f.name for f in sequence_table_schema(tenant) if f.name.startswith(SEQUENCE)]
    same = " AND ".join(f"s.{c} IS NOT DISTINCT FROM f.{c}" for c in columns)
    if samples_table is not None:
        samples = load_existing_table(config, samples_table)
        if samples.current_snapshot() is None or fatrow.current_snapshot() is None:
            return 0
        rebuilt = f"iceberg_scan({sql_literal(as_of or samples.metadata_location)})"
    else:
        assert parquet_glob is not None, "fatrow_match needs samples_table or parquet_glob"
        rebuilt = f"read_parquet({sql_literal(parquet_glob)})"
    with lake_cursor() as con:
        counted = con.execute(
            f"SELECT count(*) FROM iceberg_scan({sql_literal(fatrow.metadata_location)}) AS f "
            f"JOIN {rebuilt} AS s USING (request_id) WHERE {same}"
        ).fetchone()
    assert counted is not None  # an aggregate answers one row
    (matched,) = counted
    return int(matched)


def read_fatrows_pyarrow(config: Config, tenant: Tenant) -> tuple[float, int]:
    """Seconds to stream every fat row of the tenant with pyiceberg/pyarrow, and the rows read."""
    table = load_existing_table(config, fatrow_table_name(tenant))
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in table.scan().to_arrow_batch_reader())
    return time.perf_counter() - started, rows
