"""Import one event file (Parquet, CSV, JSON lines, `::`-style .dat) as raw source records.

The file is read in batches of Arrow columns; one DuckDB statement maps each batch of rows to
records (``events.RAW_SCHEMA``), writing the payloads the per-row reference writes (`payloads_sql`,
`payloads`). Records of a file:
- source partition: ``first_partition + user_id % source_partitions`` (one partition per file by
  default); records whose user id is not an integer go to ``first_partition``;
- arrival time: the ``arrival_time`` column if the mapping names one, else the event time; a record
  without a usable time (it will be quarantined) arrives with the previous usable time of the file;
- LSN: position in arrival order within the partition, 0..n-1. Arrival order is (arrival time,
  partition, row position in the file): a total order, so the output is the same bytes on every run.
  Records are staged in a temporary Arrow file and sorted by DuckDB, which spills to disk past its
  memory limit (out of core); a file already in arrival order is streamed back without a sort.
Memory holds a batch at a time (`batch_rows`, at least `MAP_ROWS` rows mapped by one statement),
whatever the file's size.

A .dat or CSV line with the wrong number of fields becomes a record whose payload keeps the line's
text (`payload.unreadable_line_payload`; quarantined as unreadable_line), so nothing is lost without a
trace. A CSV or .dat file is read in blocks of whole lines (`lines`), so a line that is not UTF-8 or is
longer than the mapping's `max_line_bytes`, and in a CSV file a header line the mapping says is
not there (`header: false`), are unreadable lines too, kept as far as is safe (`lines.kept_text`); each is named
with its line number and reason (`ImportStats.unreadable_lines`) and the rest of the file imports.

Events whose time lies outside the configured bounds (`events` in the configuration) are counted with
their range (`ImportStats`); the import refuses such a file unless told (`allow_out_of_range`), since
ingest would quarantine them; events without a time ingest reads are counted too (`no_time`). A
header line is refused when it reads as an event (`header` with `fields` on a file that has no header
line: its first event would be lost).
"""

from __future__ import annotations

import csv
import queue
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
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
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.importers.ids import CURRENT_SCHEME
from seqlake.pipelines.importers.lines import (
    DEFAULT_MAX_LINE_BYTES,
    KEPT_BYTES,
    BadLine,
    Block,
    blocks,
    kept_text,
)
from seqlake.pipelines.importers.mapping import ExplodeSpec, ImportMapping
from seqlake.pipelines.importers.payloads import EventMapper, out_of_range, usable_time
from seqlake.pipelines.importers.payloads_sql import BatchMapper, MappedBatch

STAGE_SCHEMA = pa.schema(
    [
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("arrival_ms", pa.int64()),  # NULL: before the file's first usable time
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)
MAP_ROWS = 1 << 17  # source rows one statement maps (at least: batch_rows if larger)
MAP_THREADS = 2  # statements mapping batches at once
SORT_THREADS = 2  # DuckDB's, to sort the records of a file out of arrival order
WAITING_ROWS = 1 << 20  # streaming: records held before the first usable time (more: staged)
MEMORY_LIMIT = "1GB"  # DuckDB's, for a sort of the staged records: past it, it spills to disk
NAMED_LINES = 1000  # unreadable lines named with their number and reason (all are counted)


@dataclass
class ImportStats:
    """What an import read and emitted."""

    rows: int = 0  # events read from the source (after explode)
    records: int = 0  # raw records emitted
    unreadable: int = 0  # lines that did not parse (emitted with their text as payload)
    skipped: int = 0  # events dropped for an unmapped action value (unknown_action: skip)
    no_time: int = 0  # events without a time ingest reads (missing or unparseable: quarantined at ingest)
    # The first NAMED_LINES unreadable lines of a text file: (line number, reason). A report, not a count.
    unreadable_lines: list[tuple[int, str]] = field(default_factory=list, compare=False)
    partitions: set[int] = field(default_factory=set)
    min_event_ms: int | None = None  # the event times ingest accepts, first and last
    max_event_ms: int | None = None
    out_of_range: int = 0  # events whose time is outside the configured bounds (quarantined at ingest)
    min_out_of_range_ms: int | None = None
    max_out_of_range_ms: int | None = None

    def reset(self) -> None:
        """Nothing seen yet (a file read again from its start)."""
        self.__dict__.update(ImportStats().__dict__)

    def name_unreadable(self, lines: Iterable[BadLine]) -> None:
        room = NAMED_LINES - len(self.unreadable_lines)
        if room > 0:
            self.unreadable_lines.extend((line.number, line.reason) for line in list(lines)[:room])

    @property
    def quarantined(self) -> int:
        """Records the import knows ingest will quarantine: unreadable lines, events without a time
        ingest reads or with one outside the configured event times."""
        return self.unreadable + self.no_time + self.out_of_range

    def saw(self, event_ms: int) -> None:
        self.min_event_ms = event_ms if self.min_event_ms is None else min(self.min_event_ms, event_ms)
        self.max_event_ms = event_ms if self.max_event_ms is None else max(self.max_event_ms, event_ms)

    def saw_out_of_range(self, event_ms: int, count: int = 1, last_ms: int | None = None) -> None:
        """`count` events outside the bounds, from `event_ms` to `last_ms` (default: the same)."""
        last_ms = event_ms if last_ms is None else last_ms
        self.out_of_range += count
        low, high = self.min_out_of_range_ms, self.max_out_of_range_ms
        self.min_out_of_range_ms = event_ms if low is None else min(low, event_ms)
        self.max_out_of_range_ms = last_ms if high is None else max(high, last_ms)


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
    id_scheme: int = CURRENT_SCHEME,
    restart: Callable[[], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Raw source records (RAW_SCHEMA batches of at most `batch_rows`) of one event file, in arrival
    order; the same bytes on every run. See the module docstring for partitions, LSNs and arrival.
    Events without an id column get ids of `id_scheme` (`ids`). Raises ImportDataError, before
    yielding any record, if events lie outside the configured event times and `allow_out_of_range`
    is not set.

    With `restart`, records stream as they are mapped while the file is in arrival order; if it turns
    out not to be, `restart()` is called (the caller forgets every record it received from this
    call), `stats` start again and the whole file follows, sorted. The refusal of events outside
    the event times then comes after the records."""
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
    mapper = EventMapper(mapping, config, first_partition, id_scheme)
    if restart is not None:
        try:
            yield from _import(path, mapper, config, batch_rows, stats, allow_out_of_range, streaming=True)
            return
        except _Disorder:
            restart()
            stats.reset()
    yield from _import(path, mapper, config, batch_rows, stats, allow_out_of_range, streaming=False)


def _import(
    path: Path,
    mapper: EventMapper,
    config: Config,
    batch_rows: int,
    stats: ImportStats,
    allow_out_of_range: bool,
    streaming: bool,
) -> Iterator[pa.RecordBatch]:
    """The file's records: staged, then in arrival order; or `streaming`, as they are mapped
    (raising `_Disorder` when they are not in arrival order)."""
    with tempfile.TemporaryDirectory(prefix="seqlake-import-") as tmp:
        settings: dict[str, str | int | float | list[str]] = {
            "memory_limit": MEMORY_LIMIT,
            "threads": 1,  # a statement per thread (MAP_THREADS); the sort sets its own
            "temp_directory": str(Path(tmp) / "duckdb"),
        }
        with connect(extensions=(), settings=settings) as con:
            stager = _Stager(mapper.events, stats, None if streaming else Path(tmp) / "staged.arrow")
            numbering = _Numbering(stats)
            tables = _numbered(_grouped(_sources(path, mapper, batch_rows, stats), max(batch_rows, MAP_ROWS)))
            try:
                for mapped in _mapped(tables, mapper, con):
                    for batch in _sliced(stager.add(mapped), batch_rows):
                        yield numbering.records(batch)
                for batch in _sliced(stager.rest(), batch_rows):
                    yield numbering.records(batch)
            finally:
                stager.close()
            if stats.out_of_range and not allow_out_of_range:
                raise out_of_range_error(str(path), stats, config.events)
            if stager.staged_rows:
                for batch in _staged_records(stager, con, batch_rows):
                    yield numbering.records(batch)


# -- reading files in batches -----------------------------------------------------------------------------
#
# A reader yields tables of the mapping's source columns (`EventMapper.source_columns`) and `_raw`: the
# text of a line that did not parse (its columns NULL), else NULL; rows in file order.


def _sources(path: Path, mapper: EventMapper, batch_rows: int, stats: ImportStats) -> Iterator[pa.Table]:
    kind = mapper.mapping.format
    assert kind is not None  # the file import refused a mapping without one
    if kind == "csv":
        return _read_csv(path, mapper, batch_rows, stats)
    if kind == "dat":
        return _read_dat(path, mapper, batch_rows, stats)
    readers = {"parquet": _read_parquet, "jsonl": _read_jsonl}
    return readers[kind](path, mapper, batch_rows)


def _grouped(tables: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """Consecutive tables of one schema, joined up to at least `rows` rows: one statement maps them."""
    pending: list[pa.Table] = []
    count = 0
    for table in tables:
        if pending and table.schema != pending[0].schema:
            yield pa.concat_tables(pending)
            pending, count = [], 0
        pending.append(table)
        count += table.num_rows
        if count >= rows:
            yield pa.concat_tables(pending)
            pending, count = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _numbered(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """The tables with `_seq`: each row's position in the file."""
    seq = 0
    for table in tables:
        rows = table.num_rows
        yield table.append_column("_seq", pa.array(np.arange(seq, seq + rows, dtype=np.int64)))
        seq += rows


def _mapped(tables: Iterable[pa.Table], mapper: EventMapper, con: Any) -> Iterator[MappedBatch]:
    """The tables mapped by `MAP_THREADS` statements at a time (each on a cursor of its own), in order."""
    idle: queue.SimpleQueue[BatchMapper] = queue.SimpleQueue()
    cursors = [con.cursor() for _ in range(MAP_THREADS)]
    for cursor in cursors:
        idle.put(BatchMapper(mapper, cursor))

    def work(table: pa.Table) -> MappedBatch:
        batch_mapper = idle.get()
        try:
            return batch_mapper.map(table)
        finally:
            idle.put(batch_mapper)

    pending: deque[Future[MappedBatch]] = deque()
    pool = ThreadPoolExecutor(max_workers=MAP_THREADS, thread_name_prefix="seqlake-import-map")
    try:
        for table in tables:
            pending.append(pool.submit(work, table))
            if len(pending) > MAP_THREADS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for cursor in cursors:
            cursor.close()


def _with_raw(columns: dict[str, Any], rows: int, raw: pa.Array | None = None) -> pa.Table:
    return pa.table({**columns, "_raw": raw if raw is not None else pa.nulls(rows, pa.string())})


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


def _arrow_tables(tables: Iterable[pa.RecordBatch | pa.Table], mapper: EventMapper, source: str) -> Iterator[pa.Table]:
    checked = False
    for table in tables:
        if mapper.mapping.explode is not None:
            table = _explode(table, mapper.mapping.explode, source)
        if table.num_rows == 0:
            continue
        if not checked:
            mapper.check_columns(table.schema.names, source)
            checked = True
        yield _with_raw({name: table.column(name) for name in mapper.source_columns()}, table.num_rows)


def _read_parquet(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[pa.Table]:
    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    explode = mapper.mapping.explode
    wanted = set(mapper.source_columns()) | ({explode.field, explode.user} if explode else set())
    columns = [n for n in names if n in wanted]
    if explode is None:
        mapper.check_columns(names, str(path))
    if parquet.metadata.num_rows == 0:
        return
    yield from _arrow_tables(parquet.iter_batches(batch_size=batch_rows, columns=columns), mapper, str(path))


def _read_jsonl(path: Path, mapper: EventMapper, batch_rows: int) -> Iterator[pa.Table]:
    # Blocks are bytes, not rows: about 64 bytes an event, at least 1 MiB (type inference reads a block).
    block_size = max(1 << 20, batch_rows * 64)
    try:
        reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=block_size))
        yield from _arrow_tables(reader, mapper, str(path))
    except pa.ArrowInvalid as error:
        raise ImportDataError(f"{path}: not readable as JSON lines: {error}") from None


def _read_csv(path: Path, mapper: EventMapper, batch_rows: int, stats: ImportStats) -> Iterator[pa.Table]:
    """pyarrow's CSV parser over blocks of whole lines (`lines.blocks`): a line that is not UTF-8,
    longer than `max_line_bytes` or with the wrong number of fields, and a first line that is a
    header when the mapping says `header: false`, is an unreadable line, named in `stats`; the rest
    of the file imports."""
    mapping = mapper.mapping
    header = True if mapping.header is None else mapping.header
    delimiter = mapping.delimiter or ","
    limit = mapping.max_line_bytes or DEFAULT_MAX_LINE_BYTES
    block_bytes = max(1 << 20, batch_rows * 32)
    invalid: list[tuple[int | None, str, str]] = []  # rows of a block with the wrong number of fields

    def invalid_row(row: Any) -> str:
        reason = f"{row.actual_columns} fields, expected {row.expected_columns}"
        invalid.append((row.number, reason, row.text))
        return "skip"

    parse = pcsv.ParseOptions(delimiter=delimiter, invalid_row_handler=invalid_row)
    with open(path, "rb") as handle:
        chunks = blocks(handle, block_bytes, limit)
        block = next(chunks, None)
        if block is None:
            return
        names = mapping.fields
        if header:
            numbers = block.line_numbers()
            first = int(numbers[0]) if len(numbers) else None
            bad = [b for b in block.bad if first is None or b.number < first]
            if bad:
                raise ImportDataError(f"{path}: line {bad[0].number}, the header line: {bad[0].reason}")
            if first is None:  # no line but empty ones
                return
            line = block.line(first).decode("utf-8-sig")
            names = _header_names(line, parse) if mapping.fields is None else mapping.fields
            if mapping.fields:
                _refuse_header_of_data(next(csv.reader([line], delimiter=delimiter), []), mapper, str(path))
            block = block.after(first)
        assert names is not None  # a mapping without a header line names its fields
        mapper.check_columns(names, str(path))
        wanted = mapper.source_columns()
        # Every mapped column is read as text and converted by the mapping: types never drift between
        # blocks, and identifiers such as "0104257" become the number they spell.
        convert = pcsv.ConvertOptions(include_columns=wanted, column_types={n: pa.string() for n in wanted})
        lines = chain([block], chunks)
        first_block = not header
        for block in lines:
            read = pcsv.ReadOptions(
                column_names=names,
                block_size=max(block_bytes, len(block.data) + 1),  # the block, whole: as long as its longest line
                use_threads=False,  # unreadable rows are reported in file order
            )
            try:
                table = (
                    pcsv.read_csv(
                        pa.BufferReader(block.data), read_options=read, parse_options=parse, convert_options=convert
                    )
                    if block.data
                    else pa.table({n: pa.array([], pa.string()) for n in wanted})  # its only line taken out
                )
            except pa.ArrowInvalid as error:  # what the blocks do not take out first
                raise ImportDataError(f"{path}: from line {block.first_line:,}: not readable as CSV: {error}") from None
            bad = list(block.bad)
            if invalid:
                numbers = block.line_numbers()
                for number, reason, text in invalid:
                    line_number = int(numbers[number - 1]) if number is not None else block.first_line
                    bad.append(BadLine(line_number, reason, kept_text(text)))
                invalid.clear()
            if first_block:
                first_block = False
                table = _header_taken_for_data(table, block, bad, mapper, wanted)
            tables = [_with_raw({n: table.column(n) for n in wanted}, table.num_rows)] if table.num_rows else []
            if bad:  # a block's unreadable lines follow its rows
                bad.sort(key=lambda b: b.number)
                stats.name_unreadable(bad)
                tables.append(_unreadable(wanted, [b.text for b in bad]))
            if tables:
                yield pa.concat_tables(tables)


def _header_names(line: str, parse: pcsv.ParseOptions) -> list[str]:
    """The column names of a header line, as pyarrow's reader reads them."""
    options = pcsv.ReadOptions(use_threads=False)
    data = line.encode() + b"\n"  # a line alone, without its end, reads as no columns
    return pcsv.read_csv(pa.BufferReader(data), read_options=options, parse_options=parse).schema.names


def _header_taken_for_data(
    table: pa.Table, block: Block, bad: list[BadLine], mapper: EventMapper, wanted: list[str]
) -> pa.Table:
    """The first block's rows without its first line if that is a header line (the mapping says
    `header: false`): it is named as one, an unreadable line (`bad`), not mapped as an event."""
    numbers = block.line_numbers()
    if not table.num_rows or not len(numbers) or any(b.number < int(numbers[0]) for b in bad):
        return table
    if any(b.number == int(numbers[0]) for b in bad):  # the first line is unreadable already
        return table
    row = {name: table.column(name)[0].as_py() for name in wanted}
    if not mapper.reads_as_header(row):
        return table
    text = block.line(int(numbers[0])).decode("utf-8-sig")
    bad.append(
        BadLine(
            int(numbers[0]), "a header line, but the mapping says header: false (set header: true)", kept_text(text)
        )
    )
    return table.slice(1)


def _unreadable(names: list[str], lines: list[str]) -> pa.Table:
    return _with_raw({n: pa.nulls(len(lines), pa.string()) for n in names}, len(lines), pa.array(lines, pa.string()))


_NEWLINE = r"\r\n|\r|\n"  # how Python's text files split lines (universal newlines)


def _read_dat(path: Path, mapper: EventMapper, batch_rows: int, stats: ImportStats) -> Iterator[pa.Table]:
    """Delimited text with any delimiter (pyarrow's CSV reader takes one character), in blocks of
    whole lines (`lines.blocks`) split by Arrow; empty lines are skipped. Lines that cannot be read
    are unreadable lines, named in `stats`, as in a CSV file."""
    mapping = mapper.mapping
    delimiter = mapping.delimiter  # ImportMapping requires one for dat files
    assert delimiter is not None
    block_bytes = max(1 << 20, batch_rows * 64)
    with open(path, "rb") as handle:
        chunks = blocks(handle, block_bytes, mapping.max_line_bytes or DEFAULT_MAX_LINE_BYTES)
        head = next(chunks, None)
        if head is None:
            return
        names = mapping.fields
        if mapping.header:
            if head.bad and head.bad[0].number == 1:
                raise ImportDataError(f"{path}: line 1, the header line: {head.bad[0].reason}")
            first = head.line(1).decode("utf-8")
            if mapping.fields:
                _refuse_header_of_data(first.split(delimiter), mapper, str(path))
            names = mapping.fields or first.split(delimiter)
            head = head.after(1)
        assert names is not None
        mapper.check_columns(names, str(path))
        wanted = [(name, names.index(name)) for name in mapper.source_columns()]
        for block in chain([head], chunks):
            tables = []
            bad, named = list(block.bad), []
            if block.data:
                table, counts = _dat_lines(block.data.decode("utf-8"), delimiter, len(names), wanted)
                if counts:  # lines with another number of fields (in the rows, in file order): name them
                    raw = table.column("_raw").is_valid().to_numpy(zero_copy_only=False)
                    numbers = block.line_numbers()[np.flatnonzero(raw)]
                    reasons = [f"{count} fields, expected {len(names)}" for count in counts]
                    named = [BadLine(int(n), r, "") for n, r in zip(numbers, reasons, strict=True)]
                if table.num_rows:
                    tables.append(table)
            if bad:  # the block's lines that are not text follow its rows
                tables.append(_unreadable([name for name, _ in wanted], [b.text for b in bad]))
            stats.name_unreadable(sorted(named + bad, key=lambda b: b.number))
            if tables:
                yield pa.concat_tables(tables)


def _dat_lines(text: str, delimiter: str, fields: int, wanted: list[tuple[str, int]]) -> tuple[pa.Table, list[int]]:
    """The non-empty lines of `text` split by the delimiter: a column per wanted field, and the
    line's text in `_raw` (what quarantine keeps of it) when it has another number of fields; and
    those lines' numbers of fields."""
    lines = pc.list_flatten(pc.split_pattern_regex(pa.array([text], pa.string()), _NEWLINE))
    lines = pc.filter(lines, pc.not_equal(pc.binary_length(lines), 0))
    parts = pc.split_pattern(lines, delimiter)
    readable = pc.equal(pc.list_value_length(parts), fields)
    good = pc.filter(parts, readable)
    positions = np.cumsum(readable.to_numpy(zero_copy_only=False)) - 1
    where = pa.array(positions, pa.int64(), mask=~readable.to_numpy(zero_copy_only=False))
    columns = {name: pc.take(pc.list_element(good, index), where) for name, index in wanted}
    raw = pc.if_else(readable, pa.scalar(None, pa.string()), lines)
    counts: list[int] = []
    if raw.null_count < len(raw):
        raw = pc.utf8_slice_codeunits(raw, 0, KEPT_BYTES)  # a long line's start (`lines.kept_text`)
        counts = pc.filter(pc.list_value_length(parts), pc.invert(readable)).to_pylist()
    return _with_raw(columns, len(lines), raw), counts


# -- staging and ordering -----------------------------------------------------------------------------------


class _Order:
    """Whether the staged records are in arrival order already, (arrival, partition) never going
    back: then no sort is needed. The records before the file's first usable time (a prefix, staged
    without arrival) take that time."""

    def __init__(self) -> None:
        self.sorted = True
        self.last: tuple[int, int] | None = None
        self.waiting: int | None = None  # partition of the last record without arrival

    def feed(self, arrival: pa.Array, partition: pa.Array) -> None:
        if not self.sorted or not len(arrival):
            return
        parts = partition.to_numpy(zero_copy_only=False).astype(np.int64)
        waiting = arrival.null_count
        if waiting:
            prefix = parts[:waiting]
            if np.any(np.diff(prefix) < 0) or (self.waiting is not None and prefix[0] < self.waiting):
                self.sorted = False
                return
            self.waiting = int(prefix[-1])
            parts, arrival = parts[waiting:], arrival.slice(waiting)
            if not len(parts):
                return
        times = arrival.to_numpy(zero_copy_only=False)
        first = (int(times[0]), int(parts[0]))
        if self.last is not None:
            before_first = first < self.last
        else:  # the first record with a time comes after those without one: they take its time
            before_first = self.waiting is not None and self.waiting > first[1]
        step, part_step = np.diff(times), np.diff(parts)
        if before_first or not np.all((step > 0) | ((step == 0) & (part_step >= 0))):
            self.sorted = False
            return
        self.last = (int(times[-1]), int(parts[-1]))


class _Disorder(Exception):
    """The file is not in arrival order (or holds too many records before its first usable time):
    its records cannot stream as they are mapped."""


class _Stager:
    """Takes mapped records (partition, arrival ms, file position, payload) in file order and
    counts what the import saw. It stages them in an Arrow file (`path`), or, streaming (no path),
    passes them on while they are in arrival order."""

    def __init__(self, events: EventsSpec, stats: ImportStats, path: Path | None) -> None:
        self.stats = stats
        self.events = events
        self.path = path
        self.last_arrival: int | None = None
        self.first_arrival: int | None = None
        self.order = _Order()
        self.staged_rows = 0
        self.waiting: list[pa.RecordBatch] = []  # streaming: records before the first usable time
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None

    def add(self, mapped: MappedBatch) -> list[pa.RecordBatch]:
        """Stage the records; streaming, the records that can go on now, in arrival order."""
        self._count(mapped)
        arrival = self._arrival(mapped.arrival)
        if not len(arrival):
            return []
        staged = pa.record_batch([mapped.partition, arrival, mapped.seq, mapped.payload], schema=STAGE_SCHEMA)
        self.order.feed(staged.column("arrival_ms"), staged.column("source_partition"))
        if self.path is not None:
            if self._writer is None:
                self._sink = pa.OSFile(str(self.path), "wb")
                self._writer = pa.ipc.new_file(self._sink, STAGE_SCHEMA)
            self._writer.write_batch(staged)
            self.staged_rows += staged.num_rows
            return []
        if not self.order.sorted:
            raise _Disorder
        self.waiting.append(staged)
        if self.first_arrival is None:  # still waiting for the first usable time
            if sum(b.num_rows for b in self.waiting) > WAITING_ROWS:
                raise _Disorder
            return []
        return self.rest()

    def rest(self) -> list[pa.RecordBatch]:
        """Streaming, the records still waiting: they arrive with the first usable time (or the
        lower time bound if the file has none)."""
        first = self.first_arrival if self.first_arrival is not None else self.events.min_event_ms
        ready, self.waiting = _arrived(self.waiting, first), []
        return ready

    def _arrival(self, arrival: pa.Array) -> pa.Array:
        """Arrival times, a record without one taking the previous record's; NULL before the first."""
        arrival = arrival.cast(pa.int64())
        if arrival.null_count:
            arrival = pc.fill_null_forward(arrival)
            if self.last_arrival is not None:
                arrival = pc.fill_null(arrival, self.last_arrival)
        known = arrival.drop_null()
        if len(known):
            if self.first_arrival is None:
                self.first_arrival = int(known[0].as_py())
            self.last_arrival = int(known[-1].as_py())
        return arrival

    def _count(self, mapped: MappedBatch) -> None:
        stats, events = self.stats, self.events
        stats.rows += mapped.rows
        stats.unreadable += mapped.unreadable
        stats.skipped += mapped.skipped
        stats.partitions.update(int(p) for p in np.unique(mapped.partition.to_numpy(zero_copy_only=False)))
        stats.no_time += mapped.event_ms.null_count
        times = mapped.event_ms.drop_null().to_numpy(zero_copy_only=False)
        usable = (times >= events.min_event_ms) & (times <= events.max_event_ms)
        if usable.any():
            stats.saw(int(times[usable].min()))
            stats.saw(int(times[usable].max()))
        outside = times[~usable]
        if len(outside):
            stats.saw_out_of_range(int(outside.min()), len(outside), int(outside.max()))
        for value in mapped.handed_back_ms:
            if usable_time(value, events) is not None:
                stats.saw(value)
            elif out_of_range(value, events):
                stats.saw_out_of_range(value)
            else:
                stats.no_time += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._sink is not None:
            self._sink.close()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The staged records in file order (read batch by batch: memory stays bounded)."""
        with pa.OSFile(str(self.path), "rb") as source:
            reader = pa.ipc.open_file(source)
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)


def _staged_records(stager: _Stager, con: Any, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Staged records in (arrival, partition, file position) order. Records before the file's first
    usable time arrive with it (with the lower time bound if it has none)."""
    first = stager.first_arrival if stager.first_arrival is not None else stager.events.min_event_ms
    if stager.order.sorted:
        yield from _sliced(_arrived(stager.batches(), first), batch_rows)
        return
    yield from _sorted(stager, con, first, batch_rows)


def _arrived(batches: Iterable[pa.RecordBatch], first: int) -> list[pa.RecordBatch]:
    out = []
    for batch in batches:
        arrival = batch.column("arrival_ms")
        if arrival.null_count:
            batch = batch.set_column(1, "arrival_ms", pc.fill_null(arrival, first))
        out.append(batch)
    return out


def _sliced(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)


def _sorted(stager: _Stager, con: Any, first: int, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The staged records sorted by DuckDB, which spills to disk past its memory limit."""
    reader = pa.RecordBatchReader.from_batches(STAGE_SCHEMA, stager.batches())
    con.register("_staged", reader)
    con.execute(f"SET threads = {SORT_THREADS}")
    result = con.execute(
        f"SELECT source_partition, coalesce(arrival_ms, {int(first)}) AS arrival_ms, payload FROM _staged "
        "ORDER BY 2, source_partition, seq"
    )
    yield from result.to_arrow_reader(batch_rows)


class _Numbering:
    """RAW_SCHEMA batches of records in arrival order: LSNs 0..n-1 per partition, as they come."""

    def __init__(self, stats: ImportStats) -> None:
        self.stats = stats
        self.next_lsn: dict[int, int] = {}

    def records(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        partitions = batch.column("source_partition").to_numpy(zero_copy_only=False)
        lsns = np.empty(len(partitions), dtype=np.int64)
        for partition in np.unique(partitions):
            where = np.flatnonzero(partitions == partition)
            start = self.next_lsn.get(int(partition), 0)
            lsns[where] = np.arange(start, start + len(where), dtype=np.int64)
            self.next_lsn[int(partition)] = start + len(where)
        arrival = batch.column("arrival_ms").cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        self.stats.records += batch.num_rows
        return pa.RecordBatch.from_arrays(
            [
                batch.column("source_partition").cast(pa.int32()),
                pa.array(lsns, pa.int64()),
                arrival,
                batch.column("payload").cast(pa.string()),
            ],
            schema=RAW_SCHEMA,
        )
