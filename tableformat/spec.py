"""What the format core needs to know of a history table, and nothing more of the application.

A history table's shape is its feature groups, its feature columns with their types, and its bucket
count. The format core (schema, registry) takes any object with these members: the application
configuration (`seqlake.core.config.Config`) is one, `TableSpec` another, for code that has no
configuration. The format core never imports the configuration itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class BucketSpec(Protocol):
    @property
    def bucket_count(self) -> int: ...


class HistorySpec(Protocol):
    """A history table's feature groups, feature column types (name -> kind) and bucket count."""

    @property
    def feature_groups(self) -> Iterable[str]: ...

    @property
    def layout(self) -> BucketSpec: ...

    def column_types(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Buckets:
    bucket_count: int


@dataclass(frozen=True)
class TableSpec:
    """A HistorySpec without a configuration: `TableSpec(["engagement"], {"dwell_ms": "int32"}, 8)`."""

    feature_groups: tuple[str, ...]
    columns: Mapping[str, str] = field(default_factory=dict)
    buckets: int = 8

    @property
    def layout(self) -> Buckets:
        return Buckets(self.buckets)

    def column_types(self) -> dict[str, str]:
        return dict(self.columns)
