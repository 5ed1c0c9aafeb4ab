"""The sequence a model sees: its columns, its order, its checksum, its fragment.

Capture (inference) and reconstruction (training) share every definition here, so a sequence
rebuilt from history hashes to the checksum captured at inference exactly when it is the same.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import Config
from seqlake.core.errors import ConfigError
from seqlake.core.events import ARROW_TYPES
from seqlake.pipelines.training.sequence_digest import sequence_checksums_of
from seqlake.tableformat.schema import TIMESTAMP_US

SEQUENCE_PREFIX = "seq_"  # prefix of a whole sequence's list columns (fat rows, samples)
# Total order of a user's rows: event time, then arrival (LSN is unique within a source partition).
ORDER_KEYS = ("event_ts", "lsn", "source_partition")
# History columns a reconstruction needs besides the model's columns.
VERSION_COLUMNS = ("feature_group", "event_ts", "lsn", "min_lsn", "source_partition", "window_id")


class Tenant:
    """A model's read profile, resolved against the configuration."""

    def __init__(self, config: Config, name: str) -> None:
        if name not in config.tenants:
            raise ConfigError(f"unknown tenant {name!r}; the configuration has {sorted(config.tenants)}")
        spec = config.tenants[name]
        self.name = name
        self.feature_groups = tuple(spec.feature_groups)
        self.columns = tuple(config.tenant_columns(name))
        self.max_length = spec.max_length
        types = config.column_types()
        # The model input: which feature group and when, then the tenant's columns.
        self.schema = pa.schema(
            [pa.field("feature_group", pa.string()), pa.field("event_ts", TIMESTAMP_US)]
            + [pa.field(c, ARROW_TYPES[types[c]]) for c in self.columns]
        )

    @property
    def model_columns(self) -> list[str]:
        return self.schema.names

    def read_columns(self) -> tuple[str, ...]:
        """What a reconstruction reads from history: the model's columns plus the version columns."""
        return tuple(dict.fromkeys([*VERSION_COLUMNS, *self.columns]))


def tenants(config: Config) -> list[Tenant]:
    return [Tenant(config, name) for name in config.tenants]


def partition_by(rows: pa.Table, column: str) -> dict:
    """The rows split by the value of `column`, in one sort (instead of one filter per value)."""
    if rows.num_rows == 0:
        return {}
    rows = rows.sort_by(column)
    keys = rows[column].to_pylist()
    values = rows[column].to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist()]
    ends = [*starts[1:], rows.num_rows]
    return {keys[a]: rows.slice(a, b - a) for a, b in zip(starts, ends, strict=True)}


def in_order(rows: pa.Table) -> pa.Table:
    return rows.sort_by([(k, "ascending") for k in ORDER_KEYS])


def newest(rows: pa.Table, k: int | None) -> pa.Table:
    """The newest `k` rows of rows already in order (all if k is None)."""
    return rows if k is None else rows.slice(max(0, rows.num_rows - k))


def sequence_checksums(sequences: list[pa.Table], tenant: Tenant) -> list[bytes]:
    """The checksum of each sequence (model columns, in order), all in one vectorized pass."""
    columns = lists_of(sequences, tenant, SEQUENCE_PREFIX)
    rows = pa.table({f.name: columns[f"{SEQUENCE_PREFIX}{f.name}"].values for f in tenant.schema})
    lengths = np.array([s.num_rows for s in sequences], np.int64)
    return sequence_checksums_of(rows, tenant.schema, lengths).to_pylist()


def sequence_checksum(sequence: pa.Table, tenant: Tenant) -> bytes:
    [checksum] = sequence_checksums([sequence], tenant)
    return checksum


def before_key(rows: pa.Table, ts, lsn: int, partition: int) -> pa.ChunkedArray:
    """Mask of rows strictly older than the key (ts, lsn, partition) in sequence order."""
    ts_scalar = pa.scalar(ts, rows["event_ts"].type)
    older = pc.less(rows["event_ts"], ts_scalar)
    same_ts = pc.equal(rows["event_ts"], ts_scalar)
    older_lsn = pc.less(rows["lsn"], lsn)
    same_lsn = pc.equal(rows["lsn"], lsn)
    older_partition = pc.less(rows["source_partition"], partition)
    return pc.or_(older, pc.and_(same_ts, pc.or_(older_lsn, pc.and_(same_lsn, older_partition))))


def lists_of(sequences: list[pa.Table], tenant: Tenant, prefix: str) -> dict[str, pa.Array]:
    """List columns, one value per sequence, named `<prefix><model column>` (built without Python rows)."""
    lengths = [s.num_rows for s in sequences]
    offsets = pa.array([0, *itertools.accumulate(lengths)], pa.int32())
    out = {}
    for field in tenant.schema:
        chunks = [c for s in sequences for c in s[field.name].cast(field.type).chunks]
        values = pa.concat_arrays(chunks) if chunks else pa.array([], field.type)
        out[f"{prefix}{field.name}"] = pa.ListArray.from_arrays(offsets, values, type=pa.list_(field.type))
    return out


def list_schema(tenant: Tenant, prefix: str) -> list[pa.Field]:
    return [pa.field(f"{prefix}{f.name}", pa.list_(f.type)) for f in tenant.schema]
