"""Iceberg's bucket transform for int64 keys, vectorised: murmur3_x86_32 of the 8-byte little-endian
value, seed 0, sign bit cleared, modulo N. Spark's `system.bucket` and pyiceberg agree with it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_block(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    k = k * _C1
    k = _rotl(k, 15)
    k = k * _C2
    h = h ^ k
    h = _rotl(h, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def murmur3_int64(values: np.ndarray) -> np.ndarray:
    """murmur3_x86_32 hash (seed 0) of each int64, as Iceberg hashes long values; signed int32."""
    raw = np.ascontiguousarray(values, dtype="<i8").view("<u4").reshape(-1, 2)
    with np.errstate(over="ignore"):
        h = np.zeros(len(raw), dtype=np.uint32)
        h = _mix_block(h, raw[:, 0].astype(np.uint32))
        h = _mix_block(h, raw[:, 1].astype(np.uint32))
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def bucket_of(user_ids: np.ndarray | pa.Array | pa.ChunkedArray, bucket_count: int) -> np.ndarray:
    """Iceberg bucket number of each user id."""
    if isinstance(user_ids, pa.ChunkedArray | pa.Array):
        user_ids = user_ids.to_numpy(zero_copy_only=False)
    hashes = murmur3_int64(np.asarray(user_ids, dtype=np.int64))
    return ((hashes.astype(np.int64) & 0x7FFFFFFF) % bucket_count).astype(np.int32)
