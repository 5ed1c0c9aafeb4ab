"""Write one sorted history file from a stream of key-ordered Arrow batches, in bounded memory.

Rows must arrive strictly ordered by (user_id, feature_group, event_ts, lsn); the writer checks it.
Row groups follow users: a long history gets row groups of its own, short ones are packed
together, and no user is split across packed row groups. The footer records the file's facts
(key range, LSN ranges, windows, content checksum) for readers and fsck.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqlake.core.errors import SeqlakeError, UnsortedInputError
from seqlake.tableformat.checksum import ContentChecksum
from seqlake.tableformat.footer import FileFacts, LayoutDigest
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.layout import DEFAULT_POLICY, LayoutPolicy, choose_encodings, parquet_writer_options
from seqlake.tableformat.schema import FORMAT_VERSION


@dataclass(frozen=True)
class WrittenFile:
    uri: str
    facts: FileFacts
    file_size: int
    row_groups: int


class KeyOrder:
    """Checks that rows strictly increase in storage order, within and across batches: the key
    (user_id, feature group rank, event_ts, lsn), then source_partition. LSNs count per source
    partition, so two partitions may give one user equal keys (two imports of one user's events);
    the partition breaks the tie."""

    def __init__(self, group_order: Sequence[str]) -> None:
        self.groups = pa.array(sorted(group_order))
        self.last: tuple[int, ...] | None = None

    def keys(self, batch: pa.RecordBatch) -> tuple[np.ndarray, ...]:
        ranks = pc.index_in(batch.column("feature_group"), value_set=self.groups)
        if ranks.null_count:
            unknown = pc.filter(batch.column("feature_group"), pc.is_null(ranks))[0]
            raise UnsortedInputError(f"unknown feature group {unknown.as_py()!r}")
        return (
            batch.column("user_id").to_numpy(),
            ranks.to_numpy(),
            batch.column("event_ts").cast(pa.int64()).to_numpy(),
            batch.column("lsn").to_numpy(),
            batch.column("source_partition").cast(pa.int64()).to_numpy(),
        )

    def check(self, batch: pa.RecordBatch) -> None:
        columns = self.keys(batch)
        if self.last is not None:
            columns = tuple(np.concatenate([[last], column]) for last, column in zip(self.last, columns, strict=True))
        # Element-wise comparisons, not np.diff: differences of int64 keys can overflow.
        increasing = np.zeros(len(columns[0]) - 1, dtype=bool)
        for column in reversed(columns):
            increasing = (column[1:] > column[:-1]) | ((column[1:] == column[:-1]) & increasing)
        if not increasing.all():
            i = int(np.argmin(increasing))
            raise UnsortedInputError(
                f"key {tuple(int(c[i + 1]) for c in columns)} does not follow {tuple(int(c[i]) for c in columns)} "
                "(user, group rank, event_ts, lsn, source partition)"
            )
        self.last = tuple(int(c[-1]) for c in columns)


class HistoryFileWriter:
    """Streams sorted rows of one bucket of one sorted run into a Parquet file."""

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        *,
        run_id: str,
        bucket: int,
        group_order: Sequence[str],
        policy: LayoutPolicy = DEFAULT_POLICY,
        expected_users: int = 65_536,
    ) -> None:
        self.uri = uri
        self.schema = schema
        self.policy = policy
        self.run_id = run_id
        self.bucket = bucket
        self._fs, self._path = resolve_uri(uri)
        self._fs.create_dir(self._path.rsplit("/", 1)[0], recursive=True)
        self._sink = self._fs.open_output_stream(self._path)
        self._expected_users = expected_users
        # Opened at the first row group, with each column's encoding chosen from the file's first rows.
        self._writer: pq.ParquetWriter | None = None
        self._sample: list[pa.RecordBatch] = []
        self._sample_rows = 0
        self._encodings: dict[str, list[str]] = {}
        self._order = KeyOrder(group_order)
        self._checksum = ContentChecksum(schema)
        self._layout = LayoutDigest(schema.names)
        self._pending: list[pa.Table] = []  # packed short histories awaiting a row group
        self._pending_rows = 0
        self._user: int | None = None
        self._user_parts: list[pa.Table] = []  # rows of the current user
        self._user_rows = 0
        self._user_dedicated = False
        self._row_groups = 0
        self._first_key: list | None = None
        self._last_key: list | None = None
        self._lsn_ranges: dict[int, list[int]] = {}
        self._windows: list[int] = []
        self._closed = False

    # -- input ---------------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if isinstance(batch, pa.Table):
            for part in batch.select(self.schema.names).to_batches():
                self.write(part)
            return
        if batch.num_rows == 0:
            return
        batch = pa.RecordBatch.from_arrays(
            [batch.column(name).cast(f.type) for name, f in zip(self.schema.names, self.schema, strict=True)],
            schema=self.schema,
        )
        self._order.check(batch)
        self._track_facts(batch)
        if self._writer is None and self._sample_rows < self.policy.encoding_sample_rows:
            self._sample.append(batch.slice(0, self.policy.encoding_sample_rows - self._sample_rows))
            self._sample_rows += self._sample[-1].num_rows
        users = batch.column("user_id").to_numpy()
        cuts = np.flatnonzero(np.diff(users)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(users)]])
        for start, end in zip(starts, ends, strict=True):
            user = int(users[start])
            if user != self._user:
                self._finish_user()
                self._user = user
            self._user_parts.append(pa.Table.from_batches([batch.slice(start, end - start)]))
            self._user_rows += int(end - start)
            if self._user_rows >= self.policy.max_row_group_rows:
                self._spill_long_user()

    # -- row-group placement -------------------------------------------------------------------

    def _finish_user(self) -> None:
        if not self._user_rows:
            return
        rows = pa.concat_tables(self._user_parts)
        if self._user_dedicated or self._user_rows >= self.policy.dedicated_user_rows:
            self._flush_pending()
            for segment in _group_segments(rows):
                self._write_row_groups(segment)
        else:
            if self._pending_rows + self._user_rows > self.policy.packed_row_group_rows:
                self._flush_pending()
            self._pending.append(rows)
            self._pending_rows += self._user_rows
        self._user_parts, self._user_rows, self._user_dedicated = [], 0, False

    def _spill_long_user(self) -> None:
        # Bounded memory for 10^5-row users: write full row groups as soon as they are complete.
        # A long history's row groups never mix feature groups: their event-time statistics then
        # let feature-group and Top-K reads skip whole row groups.
        self._flush_pending()
        segments = _group_segments(pa.concat_tables(self._user_parts))
        for segment in segments[:-1]:
            self._write_row_groups(segment)
        last = segments[-1]
        full = (len(last) // self.policy.max_row_group_rows) * self.policy.max_row_group_rows
        self._write_row_groups(last.slice(0, full))
        rest = last.slice(full)
        self._user_parts = [rest] if len(rest) else []
        self._user_rows = len(rest)
        self._user_dedicated = True

    def _flush_pending(self) -> None:
        if self._pending:
            self._write_row_groups(pa.concat_tables(self._pending))
            self._pending, self._pending_rows = [], 0

    def _open(self) -> pq.ParquetWriter:
        """The Parquet writer, opened on first use with the encodings the sample chooses."""
        if self._writer is None:
            sample = pa.Table.from_batches(self._sample, schema=self.schema)
            choices = choose_encodings(sample, self.policy)
            self._encodings = {name: [c.encoding, c.codec] for name, c in choices.items()}
            self._sample, self._sample_rows = [], 0
            # Page checksums (CRC-32 of every page) let readers refuse a corrupt page instead of decoding it.
            options = parquet_writer_options(self.schema, self.policy, self._expected_users, choices)
            self._writer = pq.ParquetWriter(self._sink, self.schema, **options, write_page_checksum=True)
        return self._writer

    def _write_row_groups(self, rows: pa.Table) -> None:
        step = self.policy.max_row_group_rows
        writer = self._open()
        for offset in range(0, len(rows), step):
            chunk = rows.slice(offset, step).combine_chunks()
            writer.write_table(chunk, row_group_size=len(chunk))
            self._checksum.update(chunk)
            self._layout.add_table(chunk)
            self._row_groups += 1

    # -- facts ---------------------------------------------------------------------------------

    def _track_facts(self, batch: pa.RecordBatch) -> None:
        def key(i: int) -> list:
            return [
                batch.column("user_id")[i].as_py(),
                batch.column("feature_group")[i].as_py(),
                batch.column("event_ts").cast(pa.int64())[i].as_py(),
                batch.column("lsn")[i].as_py(),
            ]

        if self._first_key is None:
            self._first_key = key(0)
        self._last_key = key(batch.num_rows - 1)
        grouped = (
            pa.Table.from_batches([batch]).group_by("source_partition").aggregate([("min_lsn", "min"), ("lsn", "max")])
        )
        for part, low, high in zip(*(grouped.column(i).to_pylist() for i in range(3)), strict=True):
            seen = self._lsn_ranges.setdefault(part, [low, high])
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high)
        low, high = pc.min_max(batch.column("window_id")).values()
        low, high = low.as_py(), high.as_py()
        self._windows = [min(self._windows[0], low), max(self._windows[1], high)] if self._windows else [low, high]

    def close(self) -> WrittenFile:
        """Finish the file and return its facts. Closing twice is an error."""
        if self._closed:
            raise SeqlakeError(f"{self.uri} is already closed")
        self._closed = True
        self._finish_user()
        self._flush_pending()
        writer = self._open()  # a file without rows still gets a footer
        facts = FileFacts(
            format_version=FORMAT_VERSION,
            run_id=self.run_id,
            bucket=self.bucket,
            row_count=self._checksum.rows,
            key_min=self._first_key or [],
            key_max=self._last_key or [],
            lsn_ranges={str(k): v for k, v in sorted(self._lsn_ranges.items())},
            windows=self._windows,
            checksum=self._checksum.hexdigest(),
            layout_digest=self._layout.hexdigest(),
            encodings=self._encodings,
        )
        writer.add_key_value_metadata(facts.to_metadata())
        writer.close()
        self._sink.close()
        size = self._fs.get_file_info(self._path).size
        return WrittenFile(self.uri, facts, size, self._row_groups)

    def abort(self) -> None:
        """Drop a half-written file (used when the producer fails)."""
        if not self._closed:
            self._closed = True
            if self._writer is not None:
                self._writer.close()
            self._sink.close()
            self._fs.delete_file(self._path)

    def __enter__(self) -> HistoryFileWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()
        elif not self._closed:
            self.close()


def _group_segments(rows: pa.Table) -> list[pa.Table]:
    """One user's key-ordered rows cut where the feature group changes."""
    groups = rows.column("feature_group").combine_chunks()
    changed = pc.not_equal(groups.slice(1), groups.slice(0, len(groups) - 1))
    cuts = [0] + (np.flatnonzero(changed.to_numpy(zero_copy_only=False)) + 1).tolist() + [len(groups)]
    return [rows.slice(a, b - a) for a, b in itertools.pairwise(cuts)]
