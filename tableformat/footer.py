"""Footer key-value metadata of a history file: what fsck and readers check without reading rows."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from seqlake.tableformat.layout import STATISTICS_COLUMNS

PREFIX = "seqlake."


@dataclass(frozen=True)
class FileFacts:
    """Facts about one history file, stored in its Parquet footer under `seqlake.*` keys."""

    format_version: str
    run_id: str
    bucket: int
    row_count: int
    key_min: list  # [user_id, feature_group, event_ts_us, lsn]
    key_max: list
    lsn_ranges: dict[str, list[int]] = field(default_factory=dict)  # partition -> [min, max]
    windows: list[int] = field(default_factory=list)  # [first, last] window ids
    checksum: str = ""
    # SHA-256 of what a reader trusts the footer for: column names, and each row group's row count and
    # min/max of the pruning columns. Parquet checksums pages, not its footer: a flipped statistic would
    # otherwise make a lookup skip a row group silently. Empty in files written before it existed.
    layout_digest: str = ""
    # Each column's [encoding, codec] as the writer chose them for this file (SPEC.md, "Encodings");
    # empty in files written before the choice was recorded.
    encodings: dict[str, list[str]] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, str]:
        return {PREFIX + k: json.dumps(v) for k, v in asdict(self).items()}

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> FileFacts | None:
        """Parse the facts from a footer's key-value metadata; None if this is no seqlake file."""
        if not metadata or (PREFIX + "format_version").encode() not in metadata:
            return None
        values = {
            key.decode()[len(PREFIX) :]: json.loads(value)
            for key, value in metadata.items()
            if key.decode().startswith(PREFIX)
        }
        known = {k: values[k] for k in cls.__dataclass_fields__ if k in values}
        return cls(**known)


# The columns whose footer statistics readers prune row groups by.
DIGEST_COLUMNS = STATISTICS_COLUMNS


def _plain(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class LayoutDigest:
    """The layout digest, built by the writer from the row groups it writes (`FileFacts.layout_digest`)."""

    def __init__(self, names: list[str]) -> None:
        self._hash = hashlib.sha256(json.dumps(list(names)).encode())
        self._columns = [c for c in DIGEST_COLUMNS if c in names]

    def add(self, rows: int, bounds: list[tuple[Any, Any]]) -> None:
        self._hash.update(json.dumps([rows, [[_plain(lo), _plain(hi)] for lo, hi in bounds]]).encode())

    def add_table(self, chunk: pa.Table) -> None:
        """A row group as written: its rows and the min/max of each pruning column, in Parquet's physical values."""
        bounds = []
        for name in self._columns:
            column = chunk.column(name)
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.int64())
            low, high = pc.min_max(column).values()
            bounds.append((low.as_py(), high.as_py()))
        self.add(chunk.num_rows, bounds)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def layout_digest_of(meta) -> str:
    """The layout digest recomputed from a Parquet footer (pyarrow FileMetaData)."""
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    digest = LayoutDigest(names)
    index = {name: i for i, name in enumerate(names)}
    types = {name: meta.schema.column(index[name]).physical_type for name in digest._columns}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        bounds = []
        for name in digest._columns:
            chunk = group.column(index[name])
            # pyarrow aborts the process when it builds statistics of a chunk whose type is damaged
            if chunk.physical_type != types[name]:
                raise ValueError(f"corrupt metadata: row group {g} column {name} is {chunk.physical_type}")
            stats = chunk.statistics
            has = stats is not None and stats.has_min_max
            bounds.append((stats.min_raw, stats.max_raw) if has else (None, None))
        digest.add(group.num_rows, bounds)
    return digest.hexdigest()


# Parquet's names of the codecs `FileFacts.encodings` records by pyarrow's names.
PARQUET_CODECS = {"none": "UNCOMPRESSED", "lz4": "LZ4", "zstd": "ZSTD", "snappy": "SNAPPY", "gzip": "GZIP"}


def encodings_differ(meta, recorded: dict[str, list[str]]) -> str | None:
    """How a file's column chunks (pyarrow FileMetaData) differ from the encodings its footer records,
    or None when they agree. A dictionary that outgrew its page limit falls back to plain pages."""
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if set(recorded) != set(names):
        return f"records encodings of columns {sorted(recorded)}, the file has {sorted(names)}"
    for g in range(meta.num_row_groups):
        for i, name in enumerate(names):
            encoding, codec = recorded[name]
            chunk = meta.row_group(g).column(i)
            expected = PARQUET_CODECS.get(codec, codec.upper())
            fell_back = encoding == "RLE_DICTIONARY" and "PLAIN" in chunk.encodings
            if chunk.compression != expected or not (encoding in chunk.encodings or fell_back):
                return (
                    f"row group {g} column {name} is {'/'.join(chunk.encodings)} under {chunk.compression}, "
                    f"the footer records {encoding} under {expected}"
                )
    return None
