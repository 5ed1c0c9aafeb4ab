"""Import one event file (Parquet, CSV, JSON lines, `::`-style .dat) as raw source records.

The file is read in batches; each row becomes a record (``events.RAW_SCHEMA``) whose payload the
mapping builds (see `payloads`). Records of a file:
- source partition: ``first_partition + user_id % source_partitions`` (one partition per file by
  default); records whose user id is not an integer go to ``first_partition``;
- arrival time: the ``arrival_time`` column if the mapping names one, else the event time; a record
  without a usable time (it will be quarantined) arrives with the previous usable time of the file;
- LSN: position in arrival order within the partition, 0..n-1. Arrival order is (arrival time,
  partition, row position in the file): a total order, so the output is the same bytes on every run.
  Records are staged in a temporary Parquet file and sorted by DuckDB, which spills to disk (out of
  core); a file already in arrival order is streamed back without a sort.

A .dat or CSV line with the wrong number of fields becomes a record whose payload keeps the line's
text (`payload.unreadable_line_payload`; quarantined as unreadable_line), so nothing is lost without a
trace. Events whose time lies outside the configured bounds (`events` in the configuration) are
counted with their range (`ImportStats`); the import refuses such a file unless told
(`allow_out_of_range`), since ingest would quarantine them. A header line is refused when it reads as
an event (`header` with `fields` on a file that has no header line: its first event would be lost).
"""

from __future__ import annotations

import csv
import itertools
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pj
import pyarrow.parquet as pq

from seqlake.core.config import Config, EventsSpec
from seqlake.core.errors import ConfigError, ImportDataError
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.payload import unreadable_line_payload
from seqlake.engines.duckdb_session import connect, sql_literal
from seqlake.pipelines.importers.mapping import ExplodeSpec, ImportMapping
from seqlake.pipelines.importers.payloads import EventMapper, out_of_range, usable_time

STAGE_SCHEMA = pa.schema(
    [
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("arrival_ms", pa.int64(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)


@dataclass
class ImportStats:
    """What an import read and emitted."""

    rows: int = 0  # events read from the source (after explode)
    records: int = 0  # raw records emitted
    unreadable: int = 0  # lines that did not parse (emitted with their text as payload)
    skipped: int = 0  # events dropped for an unmapped action value (unknown_action: skip)
    partitions: set[int] = field(default_factory=set)
    min_event_ms: int | None = None  # the event times ingest accepts, first and last
    max_event_ms: int | None = None
    out_of_range: int = 0  # events whose time is outside the configured bounds (quarantined at ingest)
    min_out_of_range_ms: int | None = None
    max_out_of_range_ms: int | None = None

    def saw(self, event_ms: int) -> None:
        self.min_event_ms = event_ms if self.min_event_ms is None else min(self.min_event_ms, event_ms)
        self.max_event_ms = event_ms if self.max_event_ms is None else max(self.max_event_ms, event_ms)

    def saw_out_of_range(self, event_ms: int) -> None:
        self.out_of_range += 1
        low, high = self.min_out_of_range_ms, self.max_out_of_range_ms
        self.min_out_of_range_ms = event_ms if low is None else min(low, event_ms)
        self.max_out_of_range_ms = event_ms if high is None else max(high, event_ms)


def out_of_range_error(source: str, stats: ImportStats, events: EventsSpec) -> ImportDataError:
    """One line: how many events of `source` lie outside the bounds, their range, and the two ways on."""
    assert stats.min_out_of_range_ms is not None and stats.max_out_of_range_ms is not None  # some were seen
    return ImportDataError(
        f"{source}: {stats.out_of_range:,} events outside the configured event times "
        f"{format_ms(events.min_event_ms)} .. {format_ms(events.max_event_ms)} UTC, from "
        f"{format_ms(stats.min_out_of_range_ms)} to {format_ms(stats.max_out_of_range_ms)} UTC: ingest "
        "would quarantine them as event_ts_out_of_range; widen events.min_event_time / events.max_event_time "
        "in the configuration to keep them, or pass --allow-out-of-range to import the file as it is"
    )


def format_ms(value: int, iso: bool = False) -> str:
    """Epoch milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC), or ISO 8601 (`...Z`); beyond the years
    Python spells (a time in microseconds taken for milliseconds), the number."""
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=value)
    except OverflowError:
        return f"epoch ms {value}"
    return moment.isoformat().replace("+00:00", "Z") if iso else moment.strftime("%Y-%m-%d %H:%M:%S")


def _refuse_header_of_data(values: list[str], mapper: EventMapper, source: str) -> None:
    """The line the mapping takes for the header (`header` with `fields`) must not read as an event:
    it is skipped, and a file without a header line would lose its first event unseen."""
    names = mapper.mapping.fields
    assert names is not None  # only asked when the mapping names the fields
    if len(values) == len(names) and mapper.reads_as_event(dict(zip(names, values, strict=True))):
        line = (mapper.mapping.delimiter or ",").join(values)
        shown = line if len(line) <= 60 else line[:57] + "..."
        raise ImportDataError(
            f"{source}: the mapping takes the first line for a header (header: true with fields), but "
            f"{shown!r} reads as an event: set header: false if the file has no header line"
        )


def import_file(
    path: str | Path,
    mapping: ImportMapping,
    config: Config,
    batch_rows: int = 65536,
    *,
    first_partition: int = 0,
    stats: ImportStats | None = None,
    allow_out_of_range: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Raw source records (RAW_SCHEMA batches of at most `batch_rows`) of one event file, in arrival
    order; the same bytes on every run. See the module docstring for partitions, LSNs and arrival.
    Raises ImportDataError, before yielding any record, if events lie outside the configured event
    times and `allow_out_of_range` is not set."""
    if mapping.format is None:
        raise ConfigError(
            "invalid import mapping: format = None: a file import needs format parquet, csv, jsonl or dat"
        )
    mapping.check(config)
    path = Path(path)
    if not path.is_file():
        raise ImportDataError(f"input {path}: no such file")
    if path.stat().st_size == 0:
        return
    stats = stats if stats is not None else ImportStats()
    mapper = EventMapper(mapping, config, first_partition)
    stager = _Stager(mapper, stats)
    with tempfile.TemporaryDirectory(prefix="seqlake-import-") as tmp:
        staged = Path(tmp) / "staged.parquet"
        writer: pq.ParquetWriter | None = None
        in_order = True
        last_key: tuple[int, int] | None = None
        try:
            for table in stager.tables(_chunks(path, mapper, batch_rows)):
                in_order, last_key = _still_in_order(table, in_order, last_key)
                writer = writer or pq.ParquetWriter(staged, STAGE_SCHEMA)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        if stats.out_of_range and not allow_out_of_range:
            raise out_of_range_error(str(path), stats, config.events)
        if writer is None:
            return
        yield from _records(staged, Path(tmp), in_order, batch_rows, stats)


# -- reading files in batches -----------------------------------------------------------------------------


@dataclass
class _Chunk:
    """Rows of the source, column by column (python values), plus unreadable lines' text (or None)."""

    columns: dict[str, list]
    rows: int
    raw: list[str | None] | None = None


def _chunks(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[_Chunk]:
    readers = {"parquet": _read_parquet, "jsonl": _read_jsonl, "csv": _read_csv, "dat": _read_dat}
    kind = mapper.mapping.format
    assert kind is not None  # the file import refused a mapping without one
    return readers[kind](path, mapper, batch_rows)


def _explode(batch: pa.RecordBatch | pa.Table, spec: ExplodeSpec, source: str) -> pa.Table:
    """One row per element of the list column `spec.field`, with the outer columns repeated."""
    names = batch.schema.names
    for key, name in (("explode.field", spec.field), ("explode.user", spec.user)):
        if name not in names:
            raise ImportDataError(f"{key} = {name!r}: no such column in {source} (columns: {names})")
    lists = batch.column(spec.field)
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    if pa.types.is_null(lists.type):  # the field is missing or null on every row of this batch
        return pa.table({})
    if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
        raise ImportDataError(f"explode.field = {spec.field!r}: is {lists.type}, not a list of events")
    elements = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists)
    columns: dict[str, pa.Array] = {}
    if pa.types.is_struct(elements.type):
        for i in range(elements.type.num_fields):
            columns[elements.type.field(i).name] = elements.field(i)
    else:
        columns[spec.field] = elements
    for name in names:
        if name != spec.field and name not in columns:
            columns[name] = pc.take(batch.column(name), parents)
    return pa.table(columns)


def _arrow_chunks(tables: Iterable[pa.RecordBatch | pa.Table], mapper: EventMapper, source: str) -> Iterator[_Chunk]:
    checked = False
    for table in tables:
        if mapper.mapping.explode is not None:
            table = _explode(table, mapper.mapping.explode, source)
        if table.num_rows == 0:
            continue
        if not checked:
            mapper.check_columns(table.schema.names, source)
            checked = True
        columns = {name: table.column(name).to_pylist() for name in mapper.source_columns()}
        yield _Chunk(columns, table.num_rows)


def _read_parquet(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[_Chunk]:
    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    explode = mapper.mapping.explode
    wanted = set(mapper.source_columns()) | ({explode.field, explode.user} if explode else set())
    columns = [n for n in names if n in wanted]
    if explode is None:
        mapper.check_columns(names, str(path))
    if parquet.metadata.num_rows == 0:
        return
    yield from _arrow_chunks(parquet.iter_batches(batch_size=batch_rows, columns=columns), mapper, str(path))


def _read_jsonl(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[_Chunk]:
    # Blocks are bytes, not rows: about 64 bytes an event, at least 1 MiB (type inference reads a block).
    block_size = max(1 << 20, batch_rows * 64)
    try:
        reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=block_size))
        yield from _arrow_chunks(reader, mapper, str(path))
    except pa.ArrowInvalid as error:
        raise ImportDataError(f"{path}: not readable as JSON lines: {error}") from None


def _read_csv(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[_Chunk]:
    mapping = mapper.mapping
    header = True if mapping.header is None else mapping.header
    block_size = max(1 << 20, batch_rows * 32)
    bad: list[str] = []

    def invalid_row(row: Any) -> str:
        bad.append(row.text)
        return "skip"

    read = pcsv.ReadOptions(
        column_names=mapping.fields,
        skip_rows=1 if header and mapping.fields else 0,
        block_size=block_size,
        use_threads=False,  # unreadable rows are reported in file order
    )
    parse = pcsv.ParseOptions(delimiter=mapping.delimiter or ",", invalid_row_handler=invalid_row)
    if header and mapping.fields:
        with open(path, encoding="utf-8", newline="") as handle:
            first = next(csv.reader(handle, delimiter=mapping.delimiter or ","), [])
        _refuse_header_of_data(first, mapper, str(path))
    probe = pcsv.open_csv(path, read_options=read, parse_options=parse)
    mapper.check_columns(probe.schema.names, str(path))
    probe.close()
    bad.clear()
    wanted = mapper.source_columns()
    # Every mapped column is read as text and converted here: types never drift between blocks, and
    # identifiers such as "0104257" become the number they spell.
    convert = pcsv.ConvertOptions(include_columns=wanted, column_types={n: pa.string() for n in wanted})
    reader = pcsv.open_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    for batch in reader:
        chunk = _Chunk({n: batch.column(n).to_pylist() for n in wanted}, batch.num_rows)
        if bad:
            for name in wanted:
                chunk.columns[name].extend([None] * len(bad))
            chunk.raw = [None] * batch.num_rows + list(bad)
            chunk.rows += len(bad)
        yield chunk
        bad.clear()
    if bad:
        yield _Chunk({n: [None] * len(bad) for n in wanted}, len(bad), list(bad))


def _read_dat(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[_Chunk]:
    """Delimited text with any delimiter (pyarrow's CSV reader takes one character): line batches."""
    mapping = mapper.mapping
    delimiter = mapping.delimiter  # ImportMapping requires one for dat files
    with open(path, encoding="utf-8", newline="") as handle:
        names = mapping.fields
        if mapping.header:
            first = handle.readline().rstrip("\r\n")
            if mapping.fields:
                _refuse_header_of_data(first.split(delimiter), mapper, str(path))
            names = mapping.fields or first.split(delimiter)
        assert names is not None
        mapper.check_columns(names, str(path))
        wanted = [(name, names.index(name)) for name in mapper.source_columns()]
        while True:
            lines = list(itertools.islice(handle, batch_rows))
            if not lines:
                return
            columns: dict[str, list] = {name: [] for name, _ in wanted}
            raw: list[str | None] = []
            for line in lines:
                text = line.rstrip("\r\n")
                if not text:
                    continue
                parts = text.split(delimiter)
                if len(parts) == len(names):
                    raw.append(None)
                    for name, index in wanted:
                        columns[name].append(parts[index])
                else:
                    raw.append(text)
                    for name, _ in wanted:
                        columns[name].append(None)
            if raw:
                yield _Chunk(columns, len(raw), raw if any(r is not None for r in raw) else None)


# -- staging and ordering -----------------------------------------------------------------------------------


class _Stager:
    """Maps chunks to staged records (partition, arrival ms, file position, payload)."""

    def __init__(self, mapper: EventMapper, stats: ImportStats) -> None:
        self.mapper = mapper
        self.stats = stats
        self.seq = 0  # position in the file of the next row
        self.last_arrival: int | None = None
        self.waiting: list[tuple[int, int, str]] = []  # records before the first usable time

    def tables(self, chunks: Iterable[_Chunk]) -> Iterator[pa.Table]:
        """A staged table per chunk that emits records, then the records no usable time ever came for."""
        for chunk in chunks:
            table = self._stage(chunk)
            if table.num_rows:
                yield table
        if self.waiting:  # no usable time in the whole file: they are all quarantined anyway
            parts, seqs, payloads = zip(*self.waiting, strict=True)
            self.waiting = []
            first = self.mapper.events.min_event_ms
            yield pa.table([list(parts), [first] * len(seqs), list(seqs), list(payloads)], schema=STAGE_SCHEMA)

    def _stage(self, chunk: _Chunk) -> pa.Table:
        stats = self.stats
        parts: list[int] = []
        arrivals: list[int] = []
        seqs: list[int] = []
        payloads: list[str] = []

        def emit(partition: int, arrival: int, seq: int, payload: str) -> None:
            parts.append(partition)
            arrivals.append(arrival)
            seqs.append(seq)
            payloads.append(payload)
            stats.partitions.add(partition)

        names = list(chunk.columns)
        values = [chunk.columns[n] for n in names]
        for i in range(chunk.rows):
            seq = self.seq + i
            raw = chunk.raw[i] if chunk.raw is not None else None
            if raw is not None:
                stats.unreadable += 1
                partition, arrival, payload = self.mapper.first_partition, None, unreadable_line_payload(raw)
            else:
                stats.rows += 1
                mapped = self.mapper.event({n: v[i] for n, v in zip(names, values, strict=True)}, seq)
                if mapped is None:
                    stats.skipped += 1
                    continue
                partition, event_ms, arrival_value, payload = mapped
                events = self.mapper.events
                if usable_time(event_ms, events) is not None:
                    stats.saw(event_ms)
                elif out_of_range(event_ms, events):
                    stats.saw_out_of_range(event_ms)
                arrival = usable_time(arrival_value, events)
                if arrival is None and self.mapper.mapping.arrival_time:
                    arrival = usable_time(event_ms, events)
            if arrival is None:
                arrival = self.last_arrival
            if arrival is None:
                self.waiting.append((partition, seq, payload))
                continue
            self.last_arrival = arrival
            for waiting_partition, waiting_seq, waiting_payload in self.waiting:
                emit(waiting_partition, arrival, waiting_seq, waiting_payload)
            self.waiting = []
            emit(partition, arrival, seq, payload)
        self.seq += chunk.rows
        return pa.table([parts, arrivals, seqs, payloads], schema=STAGE_SCHEMA)


def _still_in_order(table: pa.Table, in_order: bool, last_key: tuple[int, int] | None) -> tuple[bool, tuple[int, int]]:
    """Whether the staged records so far are already in (arrival, partition) order: no sort needed."""
    arrival = table.column("arrival_ms").to_numpy()
    partition = table.column("source_partition").to_numpy().astype(np.int64)
    last = (int(arrival[-1]), int(partition[-1]))
    if not in_order:
        return False, last
    if last_key is not None and (int(arrival[0]), int(partition[0])) < last_key:
        return False, last
    step, part_step = np.diff(arrival), np.diff(partition)
    return bool(np.all((step > 0) | ((step == 0) & (part_step >= 0)))), last


def _records(staged: Path, tmp: Path, in_order: bool, batch_rows: int, stats: ImportStats) -> Iterator[pa.RecordBatch]:
    """Staged records in (arrival, partition, file position) order, with their LSNs."""
    columns = ["source_partition", "arrival_ms", "payload"]
    if in_order:
        yield from _with_lsns(pq.ParquetFile(staged).iter_batches(batch_size=batch_rows, columns=columns), stats)
        return
    con = connect(extensions=())
    try:
        con.execute(f"SET temp_directory = {sql_literal(str(tmp / 'duckdb'))}")
        result = con.execute(
            "SELECT source_partition, arrival_ms, payload FROM read_parquet(?) "
            "ORDER BY arrival_ms, source_partition, seq",
            [str(staged)],
        )
        yield from _with_lsns(result.to_arrow_reader(batch_rows), stats)
    finally:
        con.close()


def _with_lsns(batches: Iterable[pa.RecordBatch], stats: ImportStats) -> Iterator[pa.RecordBatch]:
    """RAW_SCHEMA batches: LSNs 0..n-1 per partition, in the order the records come."""
    next_lsn: dict[int, int] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        partitions = batch.column("source_partition").to_numpy(zero_copy_only=False)
        lsns = np.empty(len(partitions), dtype=np.int64)
        for partition in np.unique(partitions):
            where = np.flatnonzero(partitions == partition)
            start = next_lsn.get(int(partition), 0)
            lsns[where] = np.arange(start, start + len(where), dtype=np.int64)
            next_lsn[int(partition)] = start + len(where)
        arrival = batch.column("arrival_ms").cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        stats.records += batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [
                batch.column("source_partition").cast(pa.int32()),
                pa.array(lsns, pa.int64()),
                arrival,
                batch.column("payload").cast(pa.string()),
            ],
            schema=RAW_SCHEMA,
        )
