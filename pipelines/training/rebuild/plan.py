"""Reconstruction rules both engines share: visibility, rebuilding changed rows, assembly, verification.

Visibility (LSN mode): a history row is part of a request's sequence if its feature group is the
tenant's, its event time is in the captured range, its LSN is at or below the bound of its source
partition, and it is older than the captured fragment; the newest `length - fragment` such rows come
before the fragment. A row whose value changed after the bound (min_lsn <= bound < lsn: an event of
the same item arrived later in the same window) is rebuilt from the detail table's events up to the
bound. LSNs grow with arrival, so such rows can only belong to the window that was open at capture:
that window's rows are always rebuilt from detail, every other window's rows come from history.

Time-only mode ignores versions (no bound, no rebuild): history rows in the time range before the
fragment's first event time. It exists to show what goes wrong without versions.

Every sequence is verified against the captured checksum and length; a mismatch is never emitted.

Both engines run these rules as one relational plan per batch of pointers (DuckDB over Arrow in
arrow_reconstruct.py, Spark DataFrames in spark_reconstruct.py); tests/reconstruction_reference.py
keeps the plain per-pointer version they are checked against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import FRAGMENT

if TYPE_CHECKING:
    from seqlake.core.config import Engine

Mode = Literal["lsn", "time"]
MODES: tuple[Mode, ...] = ("lsn", "time")
# What the in-process engine was called before it took DuckDB's name; quarantine rows written then
# still carry it, and a run on the engine replaces them too.
FORMER_ENGINE_NAMES = {"duckdb": ("arrow",)}


def quarantine_engine(engine: Engine, mode: Mode) -> str:
    """The `engine` value of the quarantine rows a rebuild writes: `duckdb/lsn`, `spark/lsn`."""
    return f"{engine}/{mode}"


def quarantine_engines(engine: Engine, mode: Mode) -> list[str]:
    """The `engine` values of the quarantine rows a rebuild on `engine` replaces: its own, and those
    written under the engine's former names."""
    return [f"{name}/{mode}" for name in (engine, *FORMER_ENGINE_NAMES.get(engine, ()))]


def fragment_columns(tenant: Tenant) -> list[str]:
    """The training row's list columns holding the captured fragment, in model column order."""
    return [f"{FRAGMENT}{name}" for name in tenant.model_columns]


def reason_sql(actual_length: str, expected_length: str, actual_checksum: str, expected_checksum: str) -> str:
    """SQL (DuckDB and Spark alike) for why a sequence fails verification; NULL when it passes."""
    return (
        f"CASE WHEN {actual_length} <> {expected_length} THEN concat('length ', CAST({actual_length} AS STRING), "
        f"' != captured ', CAST({expected_length} AS STRING)) "
        f"WHEN {actual_checksum} <> {expected_checksum} THEN 'checksum mismatch' END"
    )
