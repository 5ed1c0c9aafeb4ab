"""Reconstruction on Arrow, in-process: training samples as a stream of Arrow batches.

Pointers are read bucket by bucket (the training table shares history's bucket(N, user_id)), in
batches; each batch reads its users' history once per user, with the tenant's feature groups and
columns and the union of the batch's time ranges pushed down to storage, and the open windows' detail
events once per batch. The batch is then rebuilt set-wise (`gather.gather_sequences`: binary search
over each user's sorted rows, index arithmetic, the open window aggregated by DuckDB over Arrow):
one gather per list column, one vectorized fold for every checksum, no Python per pointer or row.
`PrefetchingIterator` rebuilds the next batch while the caller consumes the current one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, StaticTable, Table
from pyiceberg.transforms import BucketTransform

from seqlake.core.config import Config
from seqlake.core.errors import SeqlakeError
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.training.rebuild.gather import SequenceRows, gather_sequences
from seqlake.pipelines.training.rebuild.plan import Mode, quarantine_engine
from seqlake.pipelines.training.rebuild.prefetch import PrefetchingIterator, ordered_map
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.sequence_digest import checksum_bytes, fold_checksums, row_lanes
from seqlake.pipelines.training.tables import QUARANTINE_SCHEMA, REQUEST_COLUMNS, SEQUENCE, sequence_table_schema
from seqlake.tableformat.cache import DEFAULT_MAX_BYTES, CachedHistoryReader, HistoryCache
from seqlake.tableformat.evolution import known_field_ids, projection, with_ids_from
from seqlake.tableformat.io import PlainFileSystem
from seqlake.tableformat.lookup_index import micros
from seqlake.tableformat.reader import stats_overlap
from seqlake.tableformat.schema import table_arrow_schema

# Landing columns a rebuild groups or orders by, besides items and the tenant's columns (detail events
# are deduplicated already: event ids are not needed).
REBUILD_KEYS = ("user_id", "feature_group", "event_ts", "lsn", "source_partition", "window_id")
DETAIL_CACHE_BYTES = 512 * 2**20  # decoded open-window detail kept for a job's batches


@dataclass(frozen=True)
class SampleBatch:
    samples: pa.Table  # sequence_table_schema(tenant): verified sequences only
    quarantined: pa.Table  # QUARANTINE_SCHEMA
    assembled: pa.Table  # every rebuilt sequence, verified or not (to measure a mode against fat rows)
    # Per row of `assembled`: VERDICT_SCHEMA (ok, reason, checksums in hex, lengths); what Spark's job returns.
    verdicts: pa.Table | None = None


# Each rebuilt sequence's verification, beside its row: the quarantine's columns, and `ok`.
VERDICT_SCHEMA = pa.schema(
    [
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("reason", pa.string()),  # null when ok
        pa.field("actual_checksum", pa.string(), nullable=False),
        pa.field("expected_checksum", pa.string(), nullable=False),
        pa.field("actual_length", pa.int32(), nullable=False),
        pa.field("expected_length", pa.int32(), nullable=False),
    ]
)
SEQUENCE_ROWS_PER_BATCH = 1 << 21  # rows of all sequences a batch may hold: bounds its memory


@dataclass(frozen=True)
class PointerFiles:
    """The training table's data files by bucket (planned once for a whole job), and the schema
    they read as: files of older schemas are read as the current one."""

    by_bucket: dict[int, tuple[str, ...]]
    target: pa.Schema
    loose: frozenset[str]
    known: frozenset[tuple[str, int]]

    @classmethod
    def of(cls, training: Table) -> PointerFiles:
        tasks = list(training.scan().plan_files())
        if any(task.delete_files for task in tasks):
            raise SeqlakeError(f"{training.name()} has row-level deletes; rewrite it before reconstructing")
        by_bucket: dict[int, list[str]] = {}
        for task in tasks:
            by_bucket.setdefault(task.file.partition[0], []).append(task.file.file_path)
        target, loose = table_arrow_schema(training.schema())
        files = {b: tuple(sorted(paths)) for b, paths in sorted(by_bucket.items())}
        return cls(files, target, loose, known_field_ids(training))

    @property
    def buckets(self) -> list[int]:
        return sorted(self.by_bucket)

    def batches(
        self, bucket: int, fs, batch_rows: int, sequence_rows: int = SEQUENCE_ROWS_PER_BATCH
    ) -> Iterator[pa.Table]:
        """The bucket's rows in batches of about `batch_rows` pointers or `sequence_rows` rows of
        sequences (their lengths), whichever comes first."""
        step = max(1, min(batch_rows, 256))
        names = self.target.names
        first: pa.Schema | None = None  # writers differ in Arrow flavour (large strings): one schema for all
        pending: list[pa.RecordBatch] = []
        rows = held = 0
        for path in self.by_bucket.get(bucket, ()):
            with fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                found = projection(parquet.schema_arrow, self.target, self.loose, self.known)
                for batch in parquet.iter_batches(batch_size=step, columns=found.file_columns(names)):
                    if not found.identity:
                        batch = found.apply(pa.Table.from_batches([batch]), names).to_batches()[0]
                    first = first or batch.schema
                    if batch.schema != first:
                        batch = batch.cast(first)
                    pending.append(batch)
                    rows += batch.num_rows
                    held += int(pc.sum(batch["length"]).as_py() or 0)
                    if rows >= batch_rows or held >= sequence_rows:
                        yield pa.Table.from_batches(pending)
                        pending, rows, held = [], 0, 0
        if pending:
            yield pa.Table.from_batches(pending)


def pointer_batches(
    training: Table, fs, batch_rows: int, sequence_rows: int = SEQUENCE_ROWS_PER_BATCH
) -> Iterator[pa.Table]:
    """The training table's rows, bucket by bucket, in batches that never mix buckets (a batch reads
    one bucket of history and detail; see `PointerFiles.batches`)."""
    yield from _in_buckets(PointerFiles.of(training), None, fs, batch_rows, sequence_rows)


def _in_buckets(
    files: PointerFiles,
    buckets: Iterable[int] | None,
    fs,
    batch_rows: int,
    sequence_rows: int = SEQUENCE_ROWS_PER_BATCH,
) -> Iterator[pa.Table]:
    first: pa.Schema | None = None  # one schema for all buckets' batches too
    for bucket in files.buckets if buckets is None else buckets:
        for batch in files.batches(bucket, fs, batch_rows, sequence_rows):
            first = first or batch.schema
            yield batch if batch.schema == first else batch.cast(first)


def detail_files(detail: Table) -> dict[int, list[str]]:
    """The detail table's data files by window (its partition): one plan for a whole job."""
    files: dict[int, list[str]] = {}
    if detail.current_snapshot() is None:
        return files
    spec = detail.spec()
    position = next(i for i, f in enumerate(spec.fields) if f.name == "window_id")
    for task in detail.scan().plan_files():
        files.setdefault(int(task.file.partition[position]), []).append(task.file.file_path)
    return files


class ReadProfile(Protocol):
    """What a detail read needs of a reader: its feature groups and columns (a `Tenant`, or all of
    a history table's for a time-range read, `seqlake.pipelines.reads.bounded`)."""

    @property
    def feature_groups(self) -> tuple[str, ...]: ...

    @property
    def columns(self) -> tuple[str, ...]: ...


def detail_events(
    config: Config,
    tenant: ReadProfile,
    fs,
    paths: list[str],
    user_ids: list[int],
    windows: list[int],
    detail_schema: Schema,
    known: frozenset[tuple[str, int]] | None = None,
    cache: HistoryCache | None = None,
) -> pa.Table:
    """Detail events of the users in the windows, of the tenant's feature groups, from the windows'
    files `paths`, with only the columns a rebuild of the tenant's rows needs (the others are
    null), rows chosen by user, group and window. With a `cache`, each file is decoded once for
    all batches (a bucket's users are spread over every row group of a window's file, sorted by
    user, so every batch would read it whole again). Files of older schemas are read as the table's
    current `detail_schema`, columns matched by field id (`known`: the ids the table ever had)."""
    schema = pa.schema([f.with_nullable(True) for f in landing_schema(config)])
    items = {config.feature_groups[g].item_column for g in tenant.feature_groups}
    needed = [n for n in schema.names if n in {*REBUILD_KEYS, *items, *tenant.columns}]
    current = with_ids_from(schema, detail_schema)  # files of older schemas read as the current one
    groups = pa.array(tenant.feature_groups)
    parts = []
    for path in paths:
        rows = cache.get(path) if cache is not None else None
        if rows is None:
            with fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                found = projection(parquet.schema_arrow, current, known=known)
                chosen = (
                    list(range(parquet.metadata.num_row_groups))
                    if cache is not None
                    else _groups_holding(parquet.metadata, min(user_ids), max(user_ids))
                )
                rows = (
                    found.apply(parquet.read_row_groups(chosen, columns=found.file_columns(needed)), needed)
                    if chosen
                    else None
                )
            if rows is None:
                continue
            rows = rows.filter(pc.is_in(rows["feature_group"], groups))
            if cache is not None:
                cache.put(path, rows)
        mask = pc.and_(
            pc.is_in(rows["user_id"], pa.array(user_ids, pa.int64())),
            pc.is_in(rows["window_id"], pa.array(windows, pa.int64())),
        )
        parts.append(rows.filter(mask))
    if not parts:
        return schema.empty_table()
    events = pa.concat_tables(parts)
    columns = {f.name: events[f.name] if f.name in needed else pa.nulls(events.num_rows, f.type) for f in schema}
    return pa.table(columns).cast(schema)


def _groups_holding(meta: pq.FileMetaData, low: int, high: int) -> list[int]:
    """Row groups whose user_id statistics overlap [low, high]."""
    column = meta.schema.to_arrow_schema().names.index("user_id")
    return [
        rg
        for rg in range(meta.num_row_groups)
        if stats_overlap(meta.row_group(rg).column(column).statistics, low, high)
    ]


ANY_BUCKET = -1  # history files whose partition does not say the pointers' bucket: every task reads them
TASK_CACHE_BYTES = 256 * 2**20  # decoded history a task keeps between its bucket's batches


@dataclass(frozen=True)
class RebuildPlan:
    """A rebuild's reads planned once on the driver, picklable: the pointer files by bucket,
    history's data files by bucket, detail's files by window, the tables' metadata without a
    catalog. `Reconstruction.of_bucket` rebuilds one bucket from it."""

    config: Config
    tenant: Tenant
    mode: Mode
    pointers: PointerFiles
    history: Table  # metadata only
    history_files: tuple[FileScanTask, ...]  # in plan order
    history_buckets: tuple[int, ...]  # each file's bucket of user_id (ANY_BUCKET: not known)
    detail: Table  # metadata only
    detail_files: dict[int, list[str]]
    batch_rows: int


class PlannedTable(StaticTable):
    """A table's snapshot whose scan returns files planned already (one bucket's): the history
    reader's lookup index plans no scan in a task."""

    def __init__(self, table: Table, tasks: tuple[FileScanTask, ...]) -> None:
        super().__init__(table.name(), table.metadata, table.metadata_location, table.io, NoopCatalog("planned"))
        self.tasks = tasks

    def scan(self, *args, **kwargs) -> _PlannedScan:  # type: ignore[override]
        return _PlannedScan(self.tasks)


@dataclass(frozen=True)
class _PlannedScan:
    tasks: tuple[FileScanTask, ...]

    def plan_files(self) -> Iterator[FileScanTask]:
        return iter(self.tasks)


def static_table(table: Table) -> Table:
    """The table's metadata and file IO, without its catalog (which does not travel)."""
    return StaticTable(table.name(), table.metadata, table.metadata_location, table.io, NoopCatalog("static"))


def _bucket_count(table: Table) -> int | None:
    """N of the table's bucket(N, user_id) partition field (its first), None if it has none."""
    field = table.spec().fields[0] if table.spec().fields else None
    return field.transform.num_buckets if field is not None and isinstance(field.transform, BucketTransform) else None


def _file_bucket(table: Table, task: FileScanTask, count: int | None) -> int:
    """The bucket of user_id a data file holds, under `count` buckets; ANY_BUCKET if its partition
    does not say (another spec, another count)."""
    user_id = table.schema().find_field("user_id").field_id
    for position, part in enumerate(table.specs()[task.file.spec_id].fields):
        transform = part.transform
        if part.source_id == user_id and isinstance(transform, BucketTransform) and transform.num_buckets == count:
            value = task.file.partition[position]
            return ANY_BUCKET if value is None else int(value)
    return ANY_BUCKET


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
        workers: int = 2,
        cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.config, self.tenant, self.mode = config, tenant, mode
        self.training, self.history, self.detail = training, history, detail
        self.fs = filesystem or PlainFileSystem()
        # Neighbours share packed row groups: the cache decodes each column chunk once for all of them.
        self.reader = CachedHistoryReader(history, filesystem=self.fs, max_bytes=cache_bytes)
        self.batch_rows, self.workers = batch_rows, workers
        self._pointer_files: PointerFiles | None = None
        self._detail_files: dict[int, list[str]] | None = None
        self._detail_cache = HistoryCache(min(DETAIL_CACHE_BYTES, cache_bytes))
        # One in-memory database for all batches (each batch a cursor: its own views, no new instance).
        self.database = connect(extensions=())
        # A batch's queries are small and batches are rebuilt on several threads already.
        self.database.execute("SET threads = 1")

    def batches(self, buckets: Iterable[int] | None = None) -> Iterator[SampleBatch]:
        """The rebuilt batches in pointer order (of `buckets` only, if given), `workers` rebuilt at a time."""
        if self._pointer_files is None:
            self._pointer_files = PointerFiles.of(self.training)
        # Pointers are not history: their bytes are not counted in the tenant's reads.
        pointers = _in_buckets(self._pointer_files, buckets, PlainFileSystem(), self.batch_rows)
        yield from ordered_map(self.rebuild, pointers, self.workers)

    def plan(self) -> RebuildPlan:
        """What this rebuild reads, planned once, for tasks that each rebuild one bucket elsewhere
        (Spark's executors): no catalog, no scan planning left to do."""
        pointers = self._pointer_files or PointerFiles.of(self.training)
        files = tuple(self.history.scan().plan_files()) if self.history.current_snapshot() is not None else ()
        count = _bucket_count(self.training)
        return RebuildPlan(
            self.config,
            self.tenant,
            self.mode,
            pointers,
            static_table(self.history),
            files,
            tuple(_file_bucket(self.history, task, count) for task in files),
            static_table(self.detail),
            self._files(),
            self.batch_rows,
        )

    @classmethod
    def of_bucket(
        cls, plan: RebuildPlan, bucket: int, workers: int = 1, cache_bytes: int = TASK_CACHE_BYTES
    ) -> Reconstruction:
        """The rebuild of one bucket of `plan`, in a task: its history files as planned (those of
        the bucket, and any whose bucket is not known), detail's files by window."""
        held = zip(plan.history_files, plan.history_buckets, strict=True)
        history = PlannedTable(plan.history, tuple(t for t, b in held if b in (bucket, ANY_BUCKET)))
        rebuild = cls(
            plan.config,
            plan.tenant,
            None,  # type: ignore[arg-type]  # the plan holds the pointer files
            history,
            plan.detail,
            plan.mode,
            batch_rows=plan.batch_rows,
            workers=workers,
            cache_bytes=cache_bytes,
        )
        rebuild._pointer_files, rebuild._detail_files = plan.pointers, plan.detail_files
        return rebuild

    def rebuild(self, pointers: pa.Table) -> SampleBatch:
        """The batch's sequences, rebuilt and verified set-wise (see `rebuild_batch`)."""
        history = self.history_rows(pointers)
        events = self._open_window_events(pointers) if self.mode == "lsn" else None
        return rebuild_batch(self.config, self.tenant, self.mode, pointers, history, events, self.database)

    def history_rows(self, pointers: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table:
        """The batch's users' history rows that its requests may need (`user_id` and the tenant's
        read columns), in file order: per data file that may hold the users (bucket and user
        bounds), the row groups whose user, feature-group and time bounds meet the batch's, read in
        one call through the reader's cache, then filtered by user, group and the batch's time span.
        No work per user: the rebuild finds each request's rows by binary search. `extra`: further
        history columns to read."""
        tenant = self.tenant
        columns = list(dict.fromkeys(["user_id", *(c for c in tenant.read_columns() if c != "user_id"), *extra]))
        users = np.unique(pointers["user_id"].to_numpy())
        start, end = pc.min(pointers["range_start"]).as_py(), pc.max(pointers["range_end"]).as_py()
        index = self.reader.lookup_index()
        parts = []
        if start is not None:
            low, high = micros(start), micros(end)
            for plan in index.plans(users.tolist()):
                entry = index.entry(plan.uri)
                held = np.asarray(plan.users, np.int64)
                chosen = np.searchsorted(held, entry.user_max, "right") > np.searchsorted(held, entry.user_min, "left")
                chosen &= (entry.ts_max >= low) & (entry.ts_min <= high)
                chosen &= _groups_meet(entry.group_min, entry.group_max, tenant.feature_groups)
                if chosen.any():
                    parts.append(self.reader.read_groups(plan.uri, np.flatnonzero(chosen).tolist(), columns))
        if not parts:
            return self.reader.arrow_schema().empty_table().select(columns)
        rows = pa.concat_tables(parts)
        groups = pa.array(tenant.feature_groups)
        ts = rows["event_ts"]
        mine = pc.and_(pc.is_in(rows["user_id"], pa.array(users)), pc.is_in(rows["feature_group"], groups))
        inside = pc.and_(pc.greater_equal(ts, pa.scalar(start, ts.type)), pc.less_equal(ts, pa.scalar(end, ts.type)))
        keep = pc.and_(mine, inside)
        return rows.filter(keep)

    def _open_window_events(self, pointers: pa.Table) -> pa.Table:
        """Detail events of the batch's users in the windows open at their captures."""
        return self.window_events(
            pc.unique(pointers["user_id"]).to_pylist(), pc.unique(pointers["open_window"]).to_pylist()
        )

    def detail_windows(self) -> frozenset[int]:
        """The windows the detail table holds (older ones have expired)."""
        return frozenset(self._files())

    def _files(self) -> dict[int, list[str]]:
        if self._detail_files is None:  # planned once: a plan per batch costs more than its reads
            self._detail_files = detail_files(self.detail)
        return self._detail_files

    def window_events(self, users: list[int], windows: list[int]) -> pa.Table:
        """Detail events of `users` in `windows`, the tenant's feature groups (see `detail_events`)."""
        if not users or not windows:
            return pa.schema([f.with_nullable(True) for f in landing_schema(self.config)]).empty_table()
        files = self._files()
        paths = [path for w in windows for path in files.get(w, [])]
        return detail_events(
            self.config,
            self.tenant,
            self.fs,
            paths,
            users,
            windows,
            self.detail.schema(),
            known_field_ids(self.detail),
            self._detail_cache,
        )


def _groups_meet(low: np.ndarray, high: np.ndarray, groups: tuple[str, ...]) -> np.ndarray:
    """Row groups whose feature-group bounds (None: unknown) may hold one of `groups`."""
    unknown = np.array([v is None for v in low], bool)
    lows, highs = np.where(unknown, "", low).astype(str), np.where(unknown, "", high).astype(str)
    meet = unknown.copy()
    for group in groups:
        meet |= ~unknown & (lows <= group) & (highs >= group)
    return meet


def rebuild_batch(
    config: Config,
    tenant: Tenant,
    mode: Mode,
    pointers: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    database: duckdb.DuckDBPyConnection | None = None,
) -> SampleBatch:
    """Rebuild and verify a batch of pointers (training rows) from their users' history rows
    (`user_id` plus the tenant's read columns) and, in LSN mode, the open windows' detail events.

    Each source row (history, rebuilt open window, fragment) is digested once however many
    sequences hold it; each sequence's checksum folds its rows' digests by position (a segmented
    sum over the batch), and the list columns are one gather per column cut by offsets."""
    con = database.cursor() if database is not None else None
    try:
        rows = gather_sequences(config, tenant, mode, pointers, history, events if mode == "lsn" else None, con=con)
    finally:
        if con is not None:
            con.close()
    actual = checksum_bytes(fold_checksums(_referenced_lanes(rows, tenant), rows.take, rows.offsets))
    actual_length = pa.array(rows.lengths.astype(np.int32))
    expected_length = pointers["length"].combine_chunks()
    expected = pointers["checksum"].combine_chunks().cast(pa.binary())
    length_ok = pc.equal(actual_length, expected_length)
    ok = pc.and_(length_ok, pc.equal(actual, expected))
    seq = sequence_table_schema(tenant)
    columns = {name: pointers[name] for name in REQUEST_COLUMNS}
    for name, values in rows.lists(tenant.model_columns).items():
        columns[f"{SEQUENCE}{name}"] = values
    assembled = pa.table(columns).cast(seq)
    failed = pc.invert(ok)
    reason = pc.if_else(
        ok,
        pa.scalar(None, pa.string()),
        pc.if_else(
            length_ok,
            pa.scalar("checksum mismatch"),
            pc.binary_join_element_wise(
                "length ", actual_length.cast(pa.string()), " != captured ", expected_length.cast(pa.string()), ""
            ),
        ),
    )
    checksums = [hex_strings(actual), hex_strings(expected)]
    verdicts = pa.Table.from_arrays(
        [ok, reason, *checksums, actual_length, expected_length.cast(pa.int32())], schema=VERDICT_SCHEMA
    )
    quarantined = pa.table(
        {
            "tenant": pa.repeat(pa.scalar(tenant.name), len(ok)),
            "request_id": pointers["request_id"],
            "user_id": pointers["user_id"],
            "engine": pa.repeat(pa.scalar(quarantine_engine("duckdb", mode)), len(ok)),
            **{name: verdicts[name] for name in QUARANTINE_SCHEMA.names if name in verdicts.column_names},
        }
    ).filter(failed)
    quarantined = quarantined.cast(QUARANTINE_SCHEMA)
    # A batch that verifies in full (the usual case) is returned as is, not copied by a filter.
    samples = assembled if quarantined.num_rows == 0 else assembled.filter(ok)
    return SampleBatch(samples, quarantined, assembled, verdicts)


def _referenced_lanes(rows: SequenceRows, tenant: Tenant) -> np.ndarray:
    """Row digests (4, n) of the source rows the sequences hold (others are left at zero): the
    users' rows outside every range are not digested."""
    held = np.zeros(rows.rows.num_rows, bool)
    held[rows.take] = True
    index = np.flatnonzero(held)
    if len(index) > 0.8 * len(held):
        return row_lanes(rows.rows, tenant.schema)
    lanes = np.zeros((4, len(held)), np.int64)
    lanes[:, index] = row_lanes(rows.rows.take(pa.array(index)), tenant.schema)
    return lanes


def hex_strings(values: pa.Array) -> pa.Array:
    """Lowercase hex of binary values (non-null), vectorized over the values' bytes."""
    values = values.cast(pa.binary())
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset : values.offset + n + 1]
    data = values.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]] if data is not None and n else np.zeros(0, np.uint8)
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    text = np.empty(2 * len(raw), np.uint8)
    text[0::2], text[1::2] = digits[raw >> 4], digits[raw & 15]
    spans = ((offsets - offsets[0]) * 2).astype(np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(spans.tobytes()), pa.py_buffer(text.tobytes()))


def sample_batches(reconstruction: Reconstruction, prefetch: int = 1) -> PrefetchingIterator:
    """Verified training samples as Arrow record batches, the next batch prefetched."""

    def batches() -> Iterator[pa.RecordBatch]:
        for result in reconstruction.batches():
            yield from result.samples.to_batches()

    return PrefetchingIterator(batches(), depth=prefetch)
