"""The lake's forget key: a secret that turns a forgotten user's id into a keyed hash, so that the
records a forget keeps for good (its tombstone, the audit, the tables' forget records once sealed) name
no user in clear, and `seqlake forget --check USER` can still find the user's request.

The key comes from the environment only (`SEQLAKE_FORGET_KEY`), like the catalog's secrets: never
from a file, never printed. Losing it loses nothing stored, but no later ingest can honour the
tombstones and no `--check` can find a request: keep it in the secret store with the catalog's.

- `user_hash`: HMAC-SHA256 of the user id's decimal text, hex; `hash_sql` is the same in DuckDB's and
  Spark's SQL (two SHA-256 over the padded key), so an ingest can join records to tombstones.
- `user_bucket`: a keyed affine hash of the id into `BUCKETS` buckets, in integer arithmetic every
  engine does alike (`bucket_sql`); it tells nothing without the key, and lets a query hash only the
  records whose bucket holds a forgotten user (SHA-256 on every record would double an ingest's time).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Literal

from seqlake.core.errors import SetupError

FORGET_KEY_ENV = "SEQLAKE_FORGET_KEY"
BUCKETS = 4096
_PRIME = 2_147_483_647  # 2^31 - 1: (id mod p) * a + b stays below 2^62, in BIGINT on every engine
_BLOCK = 64  # SHA-256's block size, HMAC's key length

Dialect = Literal["duckdb", "spark"]


def forget_key(required: bool = True) -> bytes | None:
    """The key from the environment; a one-line SetupError when it is required and not set."""
    value = os.environ.get(FORGET_KEY_ENV, "")
    if value:
        return value.encode()
    if required:
        raise SetupError(
            f"forget keeps users only as keyed hashes: set {FORGET_KEY_ENV} to the lake's forget key "
            "(a secret from your secret store, the same for every job of this warehouse)"
        )
    return None


def user_hash(key: bytes, user: int) -> str:
    return hmac.new(key, str(int(user)).encode(), hashlib.sha256).hexdigest()


def _affine(key: bytes) -> tuple[int, int]:
    digest = hmac.new(key, b"seqlake-forget-bucket", hashlib.sha256).digest()
    a = int.from_bytes(digest[:8], "big") % (_PRIME - 1) + 1
    b = int.from_bytes(digest[8:16], "big") % _PRIME
    return a, b


def user_bucket(key: bytes, user: int) -> int:
    a, b = _affine(key)
    return ((int(user) % _PRIME) * a + b) % _PRIME % BUCKETS


def bucket_sql(key: bytes, integer: str) -> str:
    """`user_bucket` of the non-negative BIGINT expression `integer` (the same text in both dialects)."""
    a, b = _affine(key)
    return f"(((CAST({integer} AS BIGINT) % {_PRIME}) * {a} + {b}) % {_PRIME} % {BUCKETS})"


def _pads(key: bytes) -> tuple[str, str]:
    block = hashlib.sha256(key).digest() if len(key) > _BLOCK else key
    block = block.ljust(_BLOCK, b"\0")
    return bytes(k ^ 0x36 for k in block).hex(), bytes(k ^ 0x5C for k in block).hex()


def hash_sql(key: bytes, text: str, dialect: Dialect) -> str:
    """`user_hash` of the VARCHAR expression `text` (a user id's decimal text), in `dialect`."""
    inner, outer = _pads(key)
    if dialect == "duckdb":
        return f"sha256(unhex('{outer}') || unhex(sha256(unhex('{inner}') || encode({text}))))"
    return f"sha2(concat(unhex('{outer}'), unhex(sha2(concat(unhex('{inner}'), encode({text}, 'UTF-8')), 256))), 256)"
