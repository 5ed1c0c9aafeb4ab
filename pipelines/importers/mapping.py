"""Import mappings: how a source's columns become seqlake's event model, loaded from YAML and validated.

A mapping (YAML in `conf/mappings/`) says which column is the user, the item, the event time (and its
unit), which feature group the events belong to, how an action column turns into bit flags, and which
other columns fill which attribute columns (optionally scaled). `parse_mapping` and `load_mapping`
check the mapping on its own; `ImportMapping.check` checks it against the configuration.
"""

from __future__ import annotations

import hashlib
import json
import math
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from seqlake.core.config import RESERVED_COLUMNS, Config, format_validation_error, read_yaml
from seqlake.core.errors import ConfigError
from seqlake.core.payload import INT_RANGES
from seqlake.core.resources import mappings_dir

MAPPINGS_DIR = mappings_dir()  # the packaged examples (conf/mappings/)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExplodeSpec(_Frozen):
    """Nested input: each row holds a list of events (`field`) and the user they belong to (`user`)."""

    field: str = Field(min_length=1)
    user: str = Field(min_length=1)


class ColumnMapping(_Frozen):
    """Source column of one target attribute column, its value multiplied by `scale` if given."""

    source: str = Field(min_length=1)
    scale: float | None = None

    @field_validator("scale")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value == 0):
            raise ValueError("scale must be a finite, non-zero number")
        return value


class ImportMapping(_Frozen):
    """How the columns of one kind of source file (or table) become seqlake events."""

    format: Literal["parquet", "csv", "jsonl", "dat"] | None = None
    delimiter: str | None = None  # csv: one character (default ","); dat: any string, e.g. "::"
    header: bool | None = None  # whether the first line names the columns (csv: yes, dat: no)
    fields: list[str] | None = None  # column names of a file without a header line
    # csv, dat: a longer line is an unreadable line, its start kept (default `lines.DEFAULT_MAX_LINE_BYTES`)
    max_line_bytes: int | None = Field(default=None, ge=1, le=1 << 30)  # a block is one Arrow buffer
    explode: ExplodeSpec | None = None
    user: str | None = None
    item: str = Field(min_length=1)
    time: str = Field(min_length=1)
    time_unit: Literal["s", "ms", "us"] = "ms"
    arrival_time: str | None = None  # arrival column (same unit); default: the event time
    event_id: str | None = None  # id column; default: a hash of the mapped event
    feature_group: str = Field(min_length=1)
    action: str | None = None
    action_flags: dict[str, int] = {}
    action_column: str = "action_flags"
    unknown_action: Literal["error", "skip", "null"] = "error"
    columns: dict[str, ColumnMapping] = {}
    user_id_offset: int = Field(default=0, ge=0)
    source_partitions: int = Field(default=1, ge=1, le=1024)

    @field_validator("action_flags", mode="before")
    @classmethod
    def _keys_as_text(cls, value: Any) -> Any:
        # YAML reads `7: 3` with an integer key; values of the action column are matched as text.
        if isinstance(value, dict):
            return {action_key(k): v for k, v in value.items()}
        return value

    @field_validator("columns", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `target: source` is short for `target: {source: source}`.
        if isinstance(value, dict):
            return {k: {"source": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ImportMapping:
        if self.explode is not None:
            if self.user is not None and self.user != self.explode.user:
                raise ValueError(f"user {self.user!r} differs from explode.user {self.explode.user!r}: give one")
            if self.format in ("csv", "dat"):
                raise ValueError(f"explode needs nested input (jsonl, parquet), not {self.format}")
        elif self.user is None:
            raise ValueError("user: the user column is required (or explode.user for nested input)")
        if self.format == "dat" and not self.delimiter:
            raise ValueError("delimiter: a dat file needs its delimiter, e.g. '::'")
        if self.format == "csv" and self.delimiter is not None and len(self.delimiter) != 1:
            raise ValueError(f"delimiter {self.delimiter!r}: csv takes one character; use format dat for longer ones")
        if self.delimiter is not None and self.format not in ("csv", "dat"):
            raise ValueError(f"delimiter applies to csv and dat files, not {self.format}")
        if self.format == "dat" and not self.header and not self.fields:
            raise ValueError("fields: a dat file without a header line needs its column names")
        if self.format == "csv" and self.header is False and not self.fields:
            raise ValueError("fields: a csv file without a header line needs its column names")
        if (self.header is not None or self.fields is not None) and self.format not in ("csv", "dat"):
            raise ValueError(f"header and fields apply to csv and dat files, not {self.format}")
        if self.max_line_bytes is not None and self.format not in ("csv", "dat"):
            raise ValueError(f"max_line_bytes applies to csv and dat files, not {self.format}")
        if self.fields is not None and len(set(self.fields)) != len(self.fields):
            raise ValueError(f"fields {self.fields}: names repeat")
        if bool(self.action) != bool(self.action_flags):
            raise ValueError("action and action_flags go together: the column and its value -> flags map")
        return self

    @property
    def user_column(self) -> str:
        return self.user if self.user is not None else self.explode.user  # type: ignore[union-attr]

    def check(self, config: Config, source: str = "<mapping>") -> None:
        """Check the mapping against the configuration: its feature group and target columns exist."""

        def fail(key: str, value: Any, message: str) -> NoReturn:
            raise ConfigError(f"invalid import mapping in {source}:\n  {key} = {value!r}: {message}")

        group = config.feature_groups.get(self.feature_group)
        if group is None:
            fail(
                "feature_group",
                self.feature_group,
                f"not a feature group of the configuration {list(config.feature_groups)}",
            )
        columns = group.columns
        if self.action:
            spec = columns.get(self.action_column)
            if spec is None:
                fail("action_column", self.action_column, f"not a column of feature group {self.feature_group!r}")
            if spec.type not in INT_RANGES:
                fail("action_column", self.action_column, f"is {spec.type}; action flags need an integer column")
            low, high = INT_RANGES[spec.type]
            for value, flags in self.action_flags.items():
                if not low <= flags <= high:
                    fail(f"action_flags.{value}", flags, f"does not fit the {spec.type} column {self.action_column!r}")
        for target, mapped in self.columns.items():
            key = f"columns.{target}"
            if target in RESERVED_COLUMNS:
                fail(key, mapped.source, "is a column seqlake fills itself (user, time, ids)")
            if target not in columns:
                fail(key, mapped.source, f"{target!r} is not a column of feature group {self.feature_group!r}")
            if target == group.item_column:
                fail(key, mapped.source, f"{target!r} is the item column: map it with `item`")
            if self.action and target == self.action_column:
                fail(key, mapped.source, f"{target!r} is filled from the action column")
            if mapped.scale is not None and columns[target].type in ("bool", "string"):
                fail(f"{key}.scale", mapped.scale, f"a {columns[target].type} column cannot be scaled")


def action_key(value: Any) -> str:
    """The text an action value is matched by: 7, 7.0 and "7" all match the key "7"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_mapping(data: Any, source: str = "<dict>") -> ImportMapping:
    """Validate a mapping; raise ConfigError naming each bad key and its value."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid import mapping in {source}: expected a mapping at the top level")
    try:
        return ImportMapping.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, "import mapping", source)) from None


def resolve_mapping_path(path: str | Path) -> Path | Traversable:
    """A mapping file; a bare name such as `otto` means the packaged conf/mappings/otto.yaml."""
    candidate = Path(path)
    if not candidate.exists() and candidate.suffix == "" and len(candidate.parts) == 1:
        named = MAPPINGS_DIR / f"{candidate}.yaml"
        if named.is_file():
            return named
    return candidate


def load_mapping(path: str | Path) -> ImportMapping:
    """Load an import mapping from YAML (a path, or the name of one in conf/mappings/)."""
    resolved = resolve_mapping_path(path)
    return parse_mapping(read_yaml(resolved, "import mapping"), str(resolved))


def mapping_digest(mapping: ImportMapping) -> str:
    """A stable digest of the mapping's content (what an import was made with)."""
    content = mapping.model_dump(mode="json")
    if content["max_line_bytes"] is None:  # not given: the digest of a mapping from before the key
        del content["max_line_bytes"]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
