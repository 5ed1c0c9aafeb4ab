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
    from pipelines.training.capture import Capture, Request
    from pipelines.training.materialize import ReconstructionResult
    from pipelines.training.sequence import Tenant
    from seqlake.config import Config, load_config
    from seqlake.errors import (
        ConfigError,
        CorruptFileError,
        RunsChanged,
        SchemaError,
        SeqlakeError,
        SetupError,
        SqlError,
    )
    from seqlake.lake import Lake, open
    from tableformat.reader import Selection

# Public name -> the module that defines it.
_EXPORTS = {
    "open": "seqlake.lake",
    "Lake": "seqlake.lake",
    "Selection": "tableformat.reader",
    "Tenant": "pipelines.training.sequence",
    "Request": "pipelines.training.capture",
    "Capture": "pipelines.training.capture",
    "ReconstructionResult": "pipelines.training.materialize",
    "Config": "seqlake.config",
    "load_config": "seqlake.config",
    "SeqlakeError": "seqlake.errors",
    "ConfigError": "seqlake.errors",
    "SchemaError": "seqlake.errors",
    "SetupError": "seqlake.errors",
    "SqlError": "seqlake.errors",
    "CorruptFileError": "seqlake.errors",
    "RunsChanged": "seqlake.errors",
}

__all__ = [
    "Capture",
    "Config",
    "ConfigError",
    "CorruptFileError",
    "Lake",
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
