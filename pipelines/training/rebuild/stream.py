"""Training samples as a stream: what a trainer reads, nothing written.

`SampleStream` iterates the in-process rebuild's verified samples as Arrow record batches, the next
batch rebuilt while the caller uses this one (`PrefetchingIterator`). Each sequence's checksum is
checked as its batch is rebuilt; a sample that fails is left out of the stream and kept in
`stream.quarantined` (QUARANTINE_SCHEMA, with its reason), and a `QuarantinedSamplesWarning` says how
many once the stream ends. `numpy_batches` gives the same batches as dicts of NumPy arrays, the
shape `tf.data.Dataset.from_generator` and a PyTorch `IterableDataset` take.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from types import TracebackType

import numpy as np
import pyarrow as pa

from seqlake.core.config import Config
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.rebuild.duckdb import Reconstruction, SampleBatch
from seqlake.pipelines.training.rebuild.plan import Mode
from seqlake.pipelines.training.rebuild.prefetch import PrefetchingIterator
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import QUARANTINE_SCHEMA, sequence_table_schema, training_table_name


class QuarantinedSamplesWarning(UserWarning):
    """Samples whose rebuilt sequence failed its checksum were left out of a stream."""


class SampleStream:
    """A tenant's verified training samples, batch by batch (`sequence_table_schema(tenant)`), in
    pointer order bucket by bucket. Iterate it once; `with` (or `close()`) stops it early."""

    def __init__(
        self, config: Config, tenant: Tenant, mode: Mode = "lsn", batch_rows: int = 2048, prefetch: int = 1
    ) -> None:
        history, detail = history_tables(config)
        training = load_existing_table(config, training_table_name(tenant))
        self.tenant = tenant
        self.schema = sequence_table_schema(tenant)
        self.requests = self.samples = 0
        self._failures: list[pa.Table] = []
        self._done = False
        reconstruction = Reconstruction(config, tenant, training, history, detail, mode=mode, batch_rows=batch_rows)
        self._batches = PrefetchingIterator(reconstruction.batches(), depth=prefetch)

    @property
    def quarantined(self) -> pa.Table:
        """The samples left out so far, each with its reason (QUARANTINE_SCHEMA)."""
        return pa.concat_tables(self._failures) if self._failures else QUARANTINE_SCHEMA.empty_table()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            yield from self._take(batch)
        self._finish()

    def _take(self, batch: SampleBatch) -> Iterator[pa.RecordBatch]:
        self.requests += batch.assembled.num_rows
        self.samples += batch.samples.num_rows
        if batch.quarantined.num_rows:
            self._failures.append(batch.quarantined)
        yield from batch.samples.to_batches()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        left_out = self.requests - self.samples
        if left_out:
            warnings.warn(
                QuarantinedSamplesWarning(
                    f"samples {self.tenant.name}: {left_out} of {self.requests} samples failed their checksum "
                    "and were left out (stream.quarantined holds them with their reasons; "
                    "`seqlake samples` records them in the quarantine table)"
                ),
                stacklevel=3,
            )

    def numpy_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches as {column: NumPy array}; a list column is an object array of arrays, one per
        sample (for `tf.data.Dataset.from_generator` or a PyTorch `IterableDataset`'s `__iter__`)."""
        for batch in self:
            yield {field.name: batch.column(field.name).to_numpy(zero_copy_only=False) for field in batch.schema}

    def close(self) -> None:
        self._batches.close()

    def __enter__(self) -> SampleStream:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
