"""Export one sorted run of the history table as RocksDB SST files for IngestExternalFile.

A serving store bulk-loads a run by ingesting every SST file of one export at once: the files hold
disjoint, increasing key ranges, and one user's history never spans two files.

Key (encoding version 1): byte-comparable, so RocksDB's default bytewise comparator orders keys
exactly as (user_id, feature_group, event_ts, lsn):

    user_id        8 bytes: big-endian int64 with the sign bit flipped (negatives sort first)
    feature_group  UTF-8 with each 0x00 byte written as 0x00 0xFF, then the terminator 0x00 0x01
    event_ts       8 bytes: microseconds since the epoch, as user_id
    lsn            8 bytes: as user_id

The first 8 bytes are the user prefix (`user_prefix`): a prefix scan returns one user's history.

Value (format version 1): one byte 0x01, then a compact UTF-8 JSON array of the projected columns in
the order listed in `manifest.json` (`value.columns`, with their Arrow types). Nulls are JSON null;
non-finite floats are written as NaN / Infinity / -Infinity, which Python's json module reads.

`manifest.json`, written last (its presence marks a complete export), records the table, snapshot,
run, encodings and each file's first/last user, first/last key (hex) and key count.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from rocksdict import DBCompressionType, Options, SstFileWriter

from seqlake.core.errors import SchemaError, SeqlakeError, UnknownRunError
from seqlake.core.progress import Progress
from seqlake.engines.duckdb_session import connect, sql_literal
from seqlake.tableformat.registry import live_runs, run_id_of_path
from seqlake.tableformat.schema import BOOKKEEPING, KEY_COLUMNS

KEY_ENCODING_VERSION = 1
VALUE_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DEFAULT_TARGET_FILE_BYTES = 64 * 2**20
BOOKKEEPING_COLUMNS = tuple(f.name for f in BOOKKEEPING)

_SIGN = np.uint64(1 << 63)
_SIGN_INT = 1 << 63
_INT64 = struct.Struct(">Q")
_GROUP_END = b"\x00\x01"
_VALUE_PREFIX = bytes([VALUE_FORMAT_VERSION])
# One encoder for every value: compact separators, UTF-8 kept as is (smaller than \u escapes).
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


# -- keys and values ---------------------------------------------------------------------------


def _flip(value: int) -> bytes:
    # Adding 2**63 flips the sign bit; struct rejects values outside int64 instead of wrapping them.
    try:
        return _INT64.pack(value + _SIGN_INT)
    except struct.error:
        raise ValueError(f"{value} is not an int64") from None


def _unflip(raw: bytes) -> int:
    return _INT64.unpack(raw)[0] - _SIGN_INT


def encode_group(feature_group: str) -> bytes:
    """Order-preserving, self-delimiting encoding of a feature group name."""
    return feature_group.encode("utf-8").replace(b"\x00", b"\x00\xff") + _GROUP_END


def encode_key(user_id: int, feature_group: str, event_ts_us: int, lsn: int) -> bytes:
    """The byte-comparable RocksDB key of one history row."""
    return _flip(user_id) + encode_group(feature_group) + _flip(event_ts_us) + _flip(lsn)


def decode_key(key: bytes) -> tuple[int, str, int, int]:
    """(user_id, feature_group, event_ts_us, lsn) of a key written by `encode_key`."""
    key = bytes(key)
    end = 8
    while True:
        end = key.find(b"\x00", end)
        if end < 0 or end + 1 >= len(key):
            raise ValueError(f"malformed history key {key.hex()}: no feature-group terminator")
        if key[end + 1] == 0x01:
            break
        if key[end + 1] != 0xFF:
            raise ValueError(f"malformed history key {key.hex()}: bad escape at byte {end}")
        end += 2
    if len(key) != end + 2 + 16:
        raise ValueError(f"malformed history key {key.hex()}: wrong length")
    group = key[8:end].replace(b"\x00\xff", b"\x00").decode("utf-8")
    return _unflip(key[:8]), group, _unflip(key[end + 2 : end + 10]), _unflip(key[end + 10 :])


def user_prefix(user_id: int) -> bytes:
    """The 8-byte prefix shared by every key of one user."""
    return _flip(user_id)


def user_key_range(user_id: int) -> tuple[bytes, bytes | None]:
    """[lower, upper) bounds of one user's keys, for ReadOptions iterate bounds; None: no upper bound."""
    upper = None if user_id == 2**63 - 1 else _flip(user_id + 1)
    return user_prefix(user_id), upper


def encode_value(values: Sequence[Any]) -> bytes:
    """A value: the format version byte, then the projected columns as a compact JSON array."""
    return _VALUE_PREFIX + _JSON.encode(list(values)).encode("utf-8")


def decode_value(value: bytes) -> list[Any]:
    """The projected column values (in manifest order) of a value written by `encode_value`."""
    if not value or value[0] != VALUE_FORMAT_VERSION:
        version = value[0] if value else None
        raise ValueError(f"unsupported history value format {version!r} (expected {VALUE_FORMAT_VERSION})")
    return json.loads(bytes(value[1:]))


# -- export ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SstFileInfo:
    name: str
    first_user: int
    last_user: int
    first_key: str  # hex
    last_key: str  # hex
    keys: int
    bytes: int


@dataclass(frozen=True)
class SstExportSummary:
    run_id: str
    snapshot_id: int | None
    columns: tuple[str, ...]
    files: tuple[SstFileInfo, ...]
    keys: int
    bytes: int
    manifest_path: Path
    seconds: float

    @property
    def paths(self) -> list[Path]:
        """The SST files in key order, as IngestExternalFile takes them."""
        return [self.manifest_path.parent / f.name for f in self.files]


def check_output_dir(out: Path, label: str | None = None) -> None:
    """An export goes to a new or empty folder: never among other files, which it could overwrite or
    be mixed with (an ingest of `*.sst` would take them too). `label` names the folder in the error."""
    named = label or str(out)
    if out.exists() and not out.is_dir():
        raise SeqlakeError(f"{named}: a file, not a folder; export to a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise SeqlakeError(f"{named}: not empty; export to a new or empty folder")


def export_run_sst(
    table: Table,
    out_dir: str | Path,
    *,
    run_id: str | None = None,
    columns: Sequence[str] | None = None,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    compression: str = "zstd",
    batch_rows: int = 65_536,
    progress: Progress | None = None,
) -> SstExportSummary:
    """Write the rows of one live run (default: the newest) as key-ordered SST files in `out_dir`.

    `columns` picks the value columns (default: every feature-group column). A file is closed once
    it reaches `target_file_bytes`, at the next user boundary, so a file may exceed the target by
    up to one user's history.
    """
    started = time.monotonic()
    if target_file_bytes <= 0:
        raise SeqlakeError(f"target file size must be positive, got {target_file_bytes}")
    codecs = {
        "none": DBCompressionType.none,
        "lz4": DBCompressionType.lz4,
        "snappy": DBCompressionType.snappy,
        "zstd": DBCompressionType.zstd,
    }
    if compression not in codecs:
        raise SeqlakeError(f"unknown compression {compression!r} (choose from {', '.join(codecs)})")
    runs = live_runs(table)
    if run_id is None:
        if not runs:
            raise UnknownRunError(f"{_name(table)} has no live runs to export")
        run_id = list(runs)[-1]  # live_runs lists oldest first
    elif run_id not in runs:
        raise UnknownRunError(f"run {run_id!r} is not live in {_name(table)}; live runs: {', '.join(runs) or 'none'}")
    iceberg_schema = table.schema()
    value_columns = _value_columns([f.name for f in iceberg_schema.fields], columns)
    snapshot = table.current_snapshot()
    tasks = [t for t in table.scan().plan_files() if run_id_of_path(t.file.file_path) == run_id]
    if any(t.delete_files for t in tasks):
        raise SeqlakeError(f"run {run_id} has delete files; the SST export does not apply deletes")
    expected_rows = sum(t.file.record_count for t in tasks)
    if progress is not None:
        progress.set_total(expected_rows)
    paths = sorted(_local_path(t.file.file_path) for t in tasks)

    out = Path(out_dir)
    check_output_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    sink = _SstSink(out, target_file_bytes, codecs[compression]())
    spill = out / ".duckdb-spill"
    try:
        if paths:
            _stream_sorted(paths, value_columns, batch_rows, spill, sink, progress)
        sink.close()
        if sink.keys != expected_rows:
            raise SeqlakeError(f"exported {sink.keys} keys but run {run_id} holds {expected_rows} rows")
        # Iceberg type names: the table's contract, whatever Arrow type a reader maps them to.
        types = {name: str(iceberg_schema.find_field(name).field_type) for name in value_columns}
        manifest: dict[str, Any] = {
            "format": "seqlake-sst-export",
            "table": _name(table),
            "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "run_id": run_id,
            "key": {
                "encoding_version": KEY_ENCODING_VERSION,
                "columns": list(KEY_COLUMNS),
                "encoding": "user_id, event_ts (us), lsn: 8-byte big-endian int64 with the sign bit "
                "flipped; feature_group: UTF-8, 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x01",
                "user_prefix_bytes": 8,
            },
            "value": {
                "format_version": VALUE_FORMAT_VERSION,
                "encoding": "1 version byte, then a compact UTF-8 JSON array of `columns` (null for null)",
                "types_are": "iceberg",
                "columns": value_columns,
                "types": types,
            },
            "compression": compression,
            "target_file_bytes": target_file_bytes,
            "keys": sink.keys,
            "bytes": sum(f.bytes for f in sink.files),
            "files": [asdict(f) for f in sink.files],
        }
        manifest_path = out / MANIFEST_NAME
        tmp = out / (MANIFEST_NAME + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, manifest_path)
    except BaseException:
        sink.abort()
        raise
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return SstExportSummary(
        run_id=run_id,
        snapshot_id=manifest["snapshot_id"],
        columns=tuple(value_columns),
        files=tuple(sink.files),
        keys=sink.keys,
        bytes=manifest["bytes"],
        manifest_path=manifest_path,
        seconds=time.monotonic() - started,
    )


def _name(table: Table) -> str:
    return ".".join(table.name())


def _value_columns(names: list[str], columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        skip = set(KEY_COLUMNS) | set(BOOKKEEPING_COLUMNS)
        return [name for name in names if name not in skip]
    out: list[str] = []
    for name in columns:
        if name in KEY_COLUMNS:
            raise SchemaError(f"column {name!r} is part of the key; choose value columns only")
        if name not in names:
            raise SchemaError(f"unknown column {name!r}; the table has {', '.join(names)}")
        if name not in out:
            out.append(name)
    return out


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    # Remote warehouses would need DuckDB's httpfs with credentials: not wired up yet.
    raise SeqlakeError(f"SST export reads local warehouses only, got {uri}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stream_sorted(
    paths: list[str],
    value_columns: list[str],
    batch_rows: int,
    spill: Path,
    sink: _SstSink,
    progress: Progress | None,
) -> None:
    # Files are sorted but one per bucket, so user ranges overlap across files: DuckDB merges them
    # with an out-of-core sort and streams the result in bounded batches.
    select = ", ".join(
        ["user_id", "feature_group", "epoch_us(event_ts) AS event_ts_us", "lsn"] + [_quote(c) for c in value_columns]
    )
    sql = (
        f"SELECT {select} FROM read_parquet($paths) "
        # A fresh connection has no default collation: VARCHAR sorts bytewise, as the encoded keys do.
        "ORDER BY user_id, feature_group, event_ts, lsn"
    )
    with connect(extensions=()) as con:
        try:
            con.execute(f"SET temp_directory = {sql_literal(str(spill))}")
            reader = con.execute(sql, {"paths": paths}).to_arrow_reader(batch_rows)
            reported = 0
            for batch in reader:
                sink.write(batch)
                if progress is not None:
                    done = sink.bytes_so_far()
                    note = f"writing {sink.current_name()}"
                    progress.add(rows=batch.num_rows, nbytes=done - reported, note=note)
                    reported = done
        except duckdb.Error as error:
            raise SeqlakeError(f"reading the run's files failed: {error}") from error


class _SstSink:
    """Writes key-ordered batches into numbered SST files, cutting only at user boundaries."""

    def __init__(self, out: Path, target_bytes: int, compression: Any) -> None:
        self.out = out
        self.target = target_bytes
        self.options = Options(raw_mode=True)  # raw bytes keys and values, no pickling
        self.options.set_compression_type(compression)
        self.files: list[SstFileInfo] = []
        self.keys = 0
        self._writer: Any = None
        self._name = ""
        self._file_keys = 0
        self._first_key = b""
        self._last_key = b""
        self._last_user: int | None = None
        self._first_user = 0
        self._written: list[Path] = []

    def write(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        users = batch.column(0).to_numpy()
        # Fixed-width key parts for the whole batch at once; per row only slicing and joining remains.
        heads = (users.view(np.uint64) ^ _SIGN).astype(">u8").tobytes()
        tails = np.empty((n, 2), dtype=">u8")
        tails[:, 0] = batch.column(2).to_numpy().view(np.uint64) ^ _SIGN
        tails[:, 1] = batch.column(3).to_numpy().view(np.uint64) ^ _SIGN
        tail = tails.tobytes()
        groups = pc.dictionary_encode(batch.column(1))
        group_keys = [encode_group(g) for g in groups.dictionary.to_pylist()]
        group_ids = groups.indices.to_numpy()
        rows = list(zip(*(c.to_pylist() for c in batch.columns[4:]), strict=True)) or [()] * n
        encode = _JSON.encode
        cuts = np.flatnonzero(users[1:] != users[:-1]) + 1
        for start, end in zip(np.r_[0, cuts].tolist(), np.r_[cuts, n].tolist(), strict=True):
            user = int(users[start])
            if user != self._last_user:
                if self._writer is not None and self._writer.file_size() >= self.target:
                    self._finish()
                if self._writer is None:
                    self._open(user)
                self._last_user = user
            writer = self._writer
            key = b""
            try:
                for i in range(start, end):
                    key = heads[8 * i : 8 * i + 8] + group_keys[group_ids[i]] + tail[16 * i : 16 * i + 16]
                    writer[key] = _VALUE_PREFIX + encode(rows[i]).encode("utf-8")
            except Exception as error:  # rocksdict raises plain Exception, e.g. for a repeated key
                raise SeqlakeError(f"cannot write key {decode_key(key)} to {self._name}: {error}") from error
            if self._file_keys == 0:
                self._first_key = heads[8 * start : 8 * start + 8] + group_keys[group_ids[start]]
                self._first_key += tail[16 * start : 16 * start + 16]
            self._file_keys += end - start
            self._last_key = key
        self.keys += n

    def current_name(self) -> str:
        return self._name if self._writer is not None else "-"

    def bytes_so_far(self) -> int:
        current = self._writer.file_size() if self._writer is not None else 0
        return sum(f.bytes for f in self.files) + current

    def _open(self, user: int) -> None:
        self._name = f"{len(self.files) + 1:06d}.sst"
        self._writer = SstFileWriter(self.options)
        path = self.out / self._name
        self._written.append(path)
        self._writer.open(str(path))
        self._first_user = user
        self._file_keys = 0

    def _finish(self) -> None:
        self._writer.finish()
        self._writer = None
        path = self.out / self._name
        assert self._last_user is not None  # a file is open: it has rows
        self.files.append(
            SstFileInfo(
                name=self._name,
                first_user=self._first_user,
                last_user=int(self._last_user),
                first_key=self._first_key.hex(),
                last_key=self._last_key.hex(),
                keys=self._file_keys,
                bytes=path.stat().st_size,
            )
        )

    def close(self) -> None:
        if self._writer is not None:
            self._finish()

    def abort(self) -> None:
        # Leave no partial export behind: a half-written SST set must never be ingested.
        self._writer = None
        for path in self._written:
            path.unlink(missing_ok=True)
        (self.out / MANIFEST_NAME).unlink(missing_ok=True)
        (self.out / (MANIFEST_NAME + ".tmp")).unlink(missing_ok=True)
