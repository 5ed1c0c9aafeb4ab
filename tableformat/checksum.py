"""Content checksum of a stream of Arrow batches: the same rows give the same digest whatever the
batch boundaries, the writer (Python or Spark) or the Parquet encoding.

Each column feeds its own SHA-256 streams (validity, values and, for strings, lengths); the digest
is the SHA-256 of the column digests in schema order.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class ContentChecksum:
    def __init__(self, schema: pa.Schema) -> None:
        self.names = schema.names
        self._types = [f.type for f in schema]
        self._streams = {name: [hashlib.sha256() for _ in range(3)] for name in self.names}
        self.rows = 0

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        self.rows += batch.num_rows
        for name, kind in zip(self.names, self._types, strict=True):
            column = batch.column(name)
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            validity, values, lengths = self._streams[name]
            validity.update(np.asarray(column.is_valid()).tobytes())
            if pa.types.is_string(kind) or pa.types.is_binary(kind):
                filled = column.fill_null("")
                lengths.update(pc.binary_length(filled).to_numpy(zero_copy_only=False).tobytes())
                # Only the value bytes in use: offsets may not start at zero in a slice.
                offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32)
                offsets = offsets[filled.offset : filled.offset + len(filled) + 1]
                data = filled.buffers()[2]
                if data is not None and len(offsets):
                    values.update(memoryview(data)[offsets[0] : offsets[-1]])
            else:
                if pa.types.is_timestamp(kind):
                    column = column.cast(pa.int64())
                filled = column.fill_null(False if pa.types.is_boolean(kind) else 0)
                values.update(np.ascontiguousarray(filled.to_numpy(zero_copy_only=False)).tobytes())

    def hexdigest(self) -> str:
        outer = hashlib.sha256()
        for name in self.names:
            for stream in self._streams[name]:
                outer.update(stream.digest())
        return outer.hexdigest()


def table_checksum(batches, schema: pa.Schema) -> str:
    """Checksum of an iterable of batches (or a Table) with `schema`."""
    checksum = ContentChecksum(schema)
    if isinstance(batches, pa.Table):
        batches = batches.to_batches()
    for batch in batches:
        checksum.update(batch)
    return checksum.hexdigest()
