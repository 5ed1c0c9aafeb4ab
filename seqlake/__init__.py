"""seqlake: a lakehouse table format and batch pipeline for long user-interaction histories.

    import seqlake

    with seqlake.open() as lake:  # $SEQLAKE_CONFIG, ./seqlake.yaml, or the packaged default
        rows = lake.history(1_000_000, feature_groups=["engagement"], top_k=100)

`open` returns a `Lake` (history, histories, sql, capture, samples). The names below load on first
use, so `import seqlake` stays light and never imports an engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from seqlake.core.config import Config, load_config
    from seqlake.core.errors import (
        CommitFailed,
        ConfigError,
        CorruptFileError,
        PastRequestError,
        RunsChanged,
        SchemaError,
        SeqlakeError,
        SetupError,
        SqlError,
    )
    from seqlake.lake import Lake, open
    from seqlake.pipelines.training.capture.pointers import Capture, Request
    from seqlake.pipelines.training.rebuild.samples import ReconstructionResult
    from seqlake.pipelines.training.sequence import Tenant
    from seqlake.tableformat.frontier import Frontier
    from seqlake.tableformat.reader import Selection

# Public name -> the module that defines it.
_EXPORTS = {
    "open": "seqlake.lake",
    "Lake": "seqlake.lake",
    "Selection": "seqlake.tableformat.reader",
    "Frontier": "seqlake.tableformat.frontier",
    "Tenant": "seqlake.pipelines.training.sequence",
    "Request": "seqlake.pipelines.training.capture.pointers",
    "Capture": "seqlake.pipelines.training.capture.pointers",
    "ReconstructionResult": "seqlake.pipelines.training.rebuild.samples",
    "Config": "seqlake.core.config",
    "load_config": "seqlake.core.config",
    "SeqlakeError": "seqlake.core.errors",
    "ConfigError": "seqlake.core.errors",
    "SchemaError": "seqlake.core.errors",
    "SetupError": "seqlake.core.errors",
    "SqlError": "seqlake.core.errors",
    "CorruptFileError": "seqlake.core.errors",
    "PastRequestError": "seqlake.core.errors",
    "RunsChanged": "seqlake.core.errors",
    "CommitFailed": "seqlake.core.errors",
}

__all__ = [
    "Capture",
    "CommitFailed",
    "Config",
    "ConfigError",
    "CorruptFileError",
    "Frontier",
    "Lake",
    "PastRequestError",
    "ReconstructionResult",
    "Request",
    "RunsChanged",
    "SchemaError",
    "Selection",
    "SeqlakeError",
    "SetupError",
    "SqlError",
    "Tenant",
    "__version__",
    "load_config",
    "open",
]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'seqlake' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
