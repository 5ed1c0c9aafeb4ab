"""Reconstruction on Arrow and DuckDB, in-process: training samples as a stream of Arrow batches.

Pointers are read bucket by bucket (the training table shares history's bucket(N, user_id)), in
batches; each batch reads its users' history once per user, with the tenant's feature groups and
columns and the union of the batch's time ranges pushed down to storage, and the open windows' detail
events once per batch. `PrefetchingIterator` rebuilds the next batch while the caller consumes the
current one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, In
from pyiceberg.table import Table

from pipelines.parse import landing_schema
from pipelines.training.prefetch import PrefetchingIterator
from pipelines.training.reconstruct import (
    POINTER_COLUMNS,
    Mode,
    assemble,
    bounds_table,
    candidate_columns,
    fragment_of,
    rebuild_rows,
    visible_history,
)
from pipelines.training.sequence import Tenant, lists_of, partition_by
from pipelines.training.tables import FRAGMENT, QUARANTINE_SCHEMA, REQUEST_COLUMNS, SEQUENCE, sequence_table_schema
from seqlake.config import Config
from seqlake.errors import SeqlakeError
from tableformat.cache import CachedHistoryReader
from tableformat.io import PlainFileSystem
from tableformat.multi_reader import histories
from tableformat.reader import Selection, stats_overlap

ONE_MICROSECOND = timedelta(microseconds=1)
# Landing columns a rebuild groups or orders by, besides items and the tenant's columns (detail events
# are deduplicated already: event ids are not needed).
REBUILD_KEYS = ("user_id", "feature_group", "event_ts", "lsn", "source_partition", "window_id")


@dataclass(frozen=True)
class SampleBatch:
    samples: pa.Table  # sequence_table_schema(tenant): verified sequences only
    quarantined: pa.Table  # QUARANTINE_SCHEMA
    assembled: pa.Table  # every rebuilt sequence, verified or not (to measure a mode against fat rows)


def pointer_batches(training: Table, fs, batch_rows: int) -> Iterator[pa.Table]:
    """The training table's rows, bucket by bucket, in batches of at most `batch_rows` that never
    mix buckets (a batch reads one bucket of history and detail)."""
    tasks = list(training.scan().plan_files())
    if any(task.delete_files for task in tasks):
        raise SeqlakeError(f"{training.name()} has row-level deletes; rewrite it before reconstructing")
    by_bucket: dict[int, list[str]] = {}
    for task in tasks:
        by_bucket.setdefault(task.file.partition[0], []).append(task.file.file_path)
    for bucket in sorted(by_bucket):
        pending: list[pa.RecordBatch] = []
        rows = 0
        for path in sorted(by_bucket[bucket]):
            with fs.open_input_file(path) as handle:
                for batch in pq.ParquetFile(handle).iter_batches(batch_size=batch_rows):
                    pending.append(batch)
                    rows += batch.num_rows
                    if rows >= batch_rows:
                        yield pa.Table.from_batches(pending)
                        pending, rows = [], 0
        if pending:
            yield pa.Table.from_batches(pending)


def detail_events(
    detail: Table, config: Config, tenant: Tenant, fs, user_ids: list[int], windows: list[int]
) -> pa.Table:
    """Detail events of the users in the windows, of the tenant's feature groups, with only the columns
    a rebuild of the tenant's rows needs (the others are null): partition pruning by window, row
    filter by user and group."""
    schema = pa.schema([f.with_nullable(True) for f in landing_schema(config)])
    items = {config.feature_groups[g].item_column for g in tenant.feature_groups}
    needed = [n for n in schema.names if n in {*REBUILD_KEYS, *items, *tenant.columns}]
    condition = And(In("window_id", set(windows)), In("user_id", set(user_ids)))
    parts = []
    for task in detail.scan(row_filter=condition).plan_files():
        with fs.open_input_file(task.file.file_path) as handle:
            parquet = pq.ParquetFile(handle)
            groups = _groups_holding(parquet.metadata, min(user_ids), max(user_ids))
            rows = parquet.read_row_groups(groups, columns=needed) if groups else None
        if rows is None:
            continue
        mask = pc.and_(
            pc.is_in(rows["user_id"], pa.array(user_ids, pa.int64())),
            pc.is_in(rows["feature_group"], pa.array(tenant.feature_groups)),
        )
        parts.append(rows.filter(pc.and_(mask, pc.is_in(rows["window_id"], pa.array(windows, pa.int64())))))
    if not parts:
        return schema.empty_table()
    found = pa.concat_tables(parts)
    columns = {f.name: found[f.name] if f.name in needed else pa.nulls(found.num_rows, f.type) for f in schema}
    return pa.table(columns).cast(schema)


def _groups_holding(meta: pq.FileMetaData, low: int, high: int) -> list[int]:
    """Row groups whose user_id statistics overlap [low, high]."""
    column = meta.schema.to_arrow_schema().names.index("user_id")
    return [
        rg
        for rg in range(meta.num_row_groups)
        if stats_overlap(meta.row_group(rg).column(column).statistics, low, high)
    ]


class Reconstruction:
    """Rebuilds a tenant's training samples from its pointers, history and detail."""

    def __init__(
        self,
        config: Config,
        tenant: Tenant,
        training: Table,
        history: Table,
        detail: Table,
        mode: Mode = "lsn",
        filesystem=None,
        batch_rows: int = 2048,
    ) -> None:
        self.config, self.tenant, self.mode = config, tenant, mode
        self.training, self.history, self.detail = training, history, detail
        self.fs = filesystem or PlainFileSystem()
        # Neighbours share packed row groups: the cache decodes each column chunk once for all of them.
        self.reader = CachedHistoryReader(history, filesystem=self.fs)
        self.batch_rows = batch_rows

    def batches(self) -> Iterator[SampleBatch]:
        # Pointers are not history: their bytes are not counted in the tenant's reads.
        for pointers in pointer_batches(self.training, PlainFileSystem(), self.batch_rows):
            yield self.rebuild(pointers)

    def rebuild(self, pointers: pa.Table) -> SampleBatch:
        tenant = self.tenant
        history_rows = self._history_rows(pointers)
        rebuilt = partition_by(self._rebuilt_rows(pointers), "request_id") if self.mode == "lsn" else {}
        sequences, ok, bad = [], [], []
        columns = candidate_columns(tenant)
        fragment_columns = [n for n in pointers.column_names if n.startswith(FRAGMENT)]
        for i, row in enumerate(pointers.select(list(POINTER_COLUMNS)).to_pylist()):
            user_rows = history_rows.get(row["user_id"])
            if self.mode == "lsn":
                candidates = visible_history(user_rows, row).select(columns)
                own = rebuilt.get(row["request_id"])
                if own is not None:
                    candidates = pa.concat_tables([candidates, own.select(columns).cast(candidates.schema)])
            else:
                candidates = user_rows.select(columns)
            fragment = fragment_of({n: pointers[n][i] for n in fragment_columns}, tenant)
            result = assemble(row, fragment, candidates, tenant, self.mode)
            sequences.append(result.sequence)
            ok.append(result.ok)
            if not result.ok:
                bad.append(_quarantine_row(tenant, row, result, engine=f"arrow/{self.mode}"))
        assembled = pointers.select(list(REQUEST_COLUMNS))
        for name, values in lists_of(sequences, tenant, SEQUENCE).items():
            assembled = assembled.append_column(name, values)
        assembled = assembled.cast(sequence_table_schema(tenant))
        quarantined = pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA)
        return SampleBatch(assembled.filter(pa.array(ok, pa.bool_())), quarantined, assembled)

    def _history_rows(self, pointers: pa.Table) -> dict[int, pa.Table]:
        """Each user's history rows that the batch's requests may need, with the tenant's groups and
        columns. A request shorter than its Top-K holds the user's whole visible history, so users
        with only such requests are read together (each row group once) up to their newest range end;
        the others are read one by one over the union of their requests' ranges."""
        tenant = self.tenant
        columns = tenant.read_columns()
        per_user = pointers.group_by("user_id").aggregate(
            [("range_start", "min"), ("range_end", "max"), ("length", "max"), ("top_k", "min")]
        )
        out: dict[int, pa.Table] = {}
        whole, whole_end = [], None
        for user, start, end, length, top_k in zip(
            *(
                per_user[c].to_pylist()
                for c in ("user_id", "range_start_min", "range_end_max", "length_max", "top_k_min")
            ),
            strict=True,
        ):
            if start is None:
                out[user] = self.reader.arrow_schema().empty_table().select(list(columns))
            elif length < top_k:
                whole.append(user)
                whole_end = end if whole_end is None else max(whole_end, end)
            else:
                ranged = Selection(tenant.feature_groups, columns, start=start, end=end + ONE_MICROSECOND)
                out[user] = self.reader.read_user(user, selection=ranged)
        if whole:
            selection = Selection(tenant.feature_groups, columns, end=whole_end + ONE_MICROSECOND)
            out.update(histories(self.reader, whole, selection, max_workers=1))
        return out

    def _rebuilt_rows(self, pointers: pa.Table) -> pa.Table:
        bounds = bounds_table(pointers)
        users = sorted(set(bounds["user_id"].to_pylist()))
        windows = sorted(set(bounds["window_id"].to_pylist()))
        events = detail_events(self.detail, self.config, self.tenant, self.fs, users, windows) if users else None
        if events is None or events.num_rows == 0:
            return rebuild_rows(self.config, landing_schema(self.config).empty_table(), bounds.slice(0, 0))
        return rebuild_rows(self.config, events, bounds)


def _quarantine_row(tenant: Tenant, pointer: dict, result, engine: str) -> dict:
    return {
        "tenant": tenant.name,
        "request_id": pointer["request_id"],
        "user_id": pointer["user_id"],
        "engine": engine,
        "reason": result.reason,
        "expected_checksum": result.expected_checksum.hex(),
        "actual_checksum": result.checksum.hex(),
        "expected_length": result.expected_length,
        "actual_length": result.sequence.num_rows,
    }


def sample_batches(reconstruction: Reconstruction, prefetch: int = 1) -> PrefetchingIterator:
    """Verified training samples as Arrow record batches, the next batch prefetched."""

    def batches() -> Iterator[pa.RecordBatch]:
        for result in reconstruction.batches():
            yield from result.samples.to_batches()

    return PrefetchingIterator(batches(), depth=prefetch)
