"""Source rows -> raw record payloads: the event JSON that ingest validates, its event id and partition.

Shared by file imports and table consumption. Values are not silently repaired: a user id that is not
an integer, a time that cannot be read or a value that does not fit its column is passed through as
it is, and ingest quarantines the record with its reason.

The event id is the mapping's ``event_id`` column if it names one, else a hash of the mapped event
(user, feature group, time and every mapped column) by a numbered scheme (`ids`): an exact duplicate
gets the same id, and compaction counts it once, whichever import or source partition it came from.

`EventMapper.event` maps one row: it is the reference the set-based mapper (`payloads_sql`, one
DuckDB statement per batch) is held to, and it maps the rare values that mapper hands back to it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from seqlake.core.config import ColumnType, Config, EventsSpec
from seqlake.core.errors import ImportDataError
from seqlake.core.payload import INT_RANGES
from seqlake.pipelines.importers.ids import CURRENT_SCHEME, check_scheme, event_id
from seqlake.pipelines.importers.mapping import ImportMapping, action_key

TIME_FACTORS_MS = {"s": 1000, "ms": 1, "us": 0.001}
_INT_TEXT = re.compile(r"^[+-]?\d+$")
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


# -- values -------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> Any:
    """Numbers stay numbers; numeric text becomes one ("0104257" -> 104257); anything else as is."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdecimal() or _INT_TEXT.match(text):
            return int(text)
        if _FLOAT_TEXT.match(text):
            return float(text)
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _clean_float(value: float) -> float:
    # 7 * 0.1 is 0.7000000000000001 in binary; 15 significant digits give back 0.7.
    return float(f"{value:.15g}")


def _as_int(value: Any, scale: float | None = None) -> Any:
    """An integer, or the value unchanged when it is not one (ingest then quarantines it)."""
    value = _number(value)
    if not _is_number(value):
        return value
    if scale is not None:
        try:
            scaled = value * scale
        except OverflowError:  # an integer beyond the floats: kept as it is
            return value
        return int(round(scaled)) if math.isfinite(scaled) else scaled
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    return value


def _convert(value: Any, kind: str, scale: float | None) -> Any:
    """A source value as the JSON value of a column of type `kind`."""
    if value is None:
        return None
    if kind in INT_RANGES:
        return _as_int(value, scale)
    if kind in ("float32", "float64"):
        value = _number(value)
        if not _is_number(value):
            return value
        try:
            number = float(value) * scale if scale is not None else float(value)
        except OverflowError:  # an integer beyond the floats: kept as it is
            return value
        return _clean_float(number) if scale is not None and math.isfinite(number) else number
    if kind == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
            return value.strip().lower() in ("true", "1")
        if _is_int(value) and value in (0, 1):
            return bool(value)
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value if isinstance(value, str) else str(value)


def _number_scaled(value: Any, scale: float | None) -> Any:
    """Without a configuration: numeric text becomes a number, scaled if asked."""
    value = _number(value)
    if scale is not None and _is_number(value):
        try:
            scaled = value * scale
        except OverflowError:  # an integer beyond the floats: kept as it is
            return value
        return _clean_float(scaled) if math.isfinite(scaled) else scaled
    return value


def _time_ms(value: Any, unit: str) -> Any:
    """Epoch milliseconds of a time value (number in `unit`, timestamp, or ISO 8601 text), or the
    value unchanged when it is none of those (ingest then quarantines the record)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, date):
        return (datetime(value.year, value.month, value.day, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
    number = _number(value)
    if isinstance(number, str):
        try:
            return _time_ms(datetime.fromisoformat(number.strip().replace("Z", "+00:00")), unit)
        except ValueError:
            return value
    if isinstance(number, int):
        return number * 1000 if unit == "s" else number if unit == "ms" else number // 1000
    if isinstance(number, float) and math.isfinite(number * TIME_FACTORS_MS[unit]):
        return int(round(number * TIME_FACTORS_MS[unit]))
    return value


def usable_time(value: Any, events: EventsSpec) -> int | None:
    """The value if it is epoch milliseconds ingest accepts as a time (`events`' bounds), else None."""
    if _is_int(value) and events.accepts(value):
        return value
    return None


def out_of_range(value: Any, events: EventsSpec) -> bool:
    """Whether the value is an event time (epoch milliseconds) outside `events`' bounds: a time
    ingest reads, then quarantines as event_ts_out_of_range."""
    return _is_int(value) and not events.accepts(value)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


# -- mapping rows to payloads ---------------------------------------------------------------------------


class EventMapper:
    """Turns source rows into (partition, event time, arrival time, payload) by the mapping."""

    def __init__(
        self,
        mapping: ImportMapping,
        config: Config | None,
        first_partition: int = 0,
        id_scheme: int = CURRENT_SCHEME,
    ) -> None:
        self.mapping = mapping
        self.first_partition = first_partition
        self.id_scheme = check_scheme(id_scheme)
        self.events = config.events if config is not None else EventsSpec()
        group = config.feature_groups[mapping.feature_group] if config is not None else None
        kinds = {name: spec.type for name, spec in group.columns.items()} if group is not None else {}
        item_target = group.item_column if group is not None else "item_id"
        # (target column, source column, kind, scale), the item first; kind None: keep source types.
        self.targets: list[tuple[str, str, ColumnType | None, float | None]] = [
            (item_target, mapping.item, kinds.get(item_target, "int64"), None)
        ]
        self.targets += [(t, c.source, kinds.get(t), c.scale) for t, c in mapping.columns.items()]
        # source column -> the mapping key that names it (for errors), in the order columns are read
        self.keys = {mapping.user_column: "user", mapping.item: "item", mapping.time: "time"}
        for name, key in (
            (mapping.arrival_time, "arrival_time"),
            (mapping.event_id, "event_id"),
            (mapping.action, "action"),
        ):
            if name:
                self.keys.setdefault(name, key)
        for target, mapped in mapping.columns.items():
            self.keys.setdefault(mapped.source, f"columns.{target}.source")

    def source_columns(self) -> list[str]:
        return list(self.keys)

    def check_columns(self, available: Iterable[str], source: str) -> None:
        available = list(available)
        for name, key in self.keys.items():
            if name not in available:
                raise ImportDataError(f"{key} = {name!r}: no such column in {source} (columns: {available})")

    def reads_as_event(self, row: dict[str, Any]) -> bool:
        """Whether a source row's user and time read as an integer user id and a time: data, not
        column names."""
        m = self.mapping
        return _is_int(_as_int(row.get(m.user_column))) and _is_int(_time_ms(row.get(m.time), m.time_unit))

    def reads_as_header(self, row: dict[str, Any]) -> bool:
        """Whether a source row reads as column names: text in every column, none of it a number or
        a time, and no event."""
        values = list(row.values())
        if not values or not all(isinstance(v, str) and v.strip() for v in values):
            return False
        if any(not isinstance(_number(v), str) for v in values) or self.reads_as_event(row):
            return False
        return all(isinstance(_time_ms(v, self.mapping.time_unit), str) for v in values)

    def _partition(self, user: Any) -> int:
        if _is_int(user) and user >= 0:
            return self.first_partition + user % self.mapping.source_partitions
        return self.first_partition

    def event(self, row: dict[str, Any], position: int) -> tuple[int, Any, Any, str] | None:
        """(partition, event time ms, arrival ms, payload) of one row; None to skip it. The times are
        the source values as they are when they cannot be read as times."""
        m = self.mapping
        event: dict[str, Any] = {}
        user = _as_int(row[m.user_column])
        if _is_int(user):
            user += m.user_id_offset
        if user is not None:
            event["user_id"] = user
        event["feature_group"] = m.feature_group
        event_ms = _time_ms(row[m.time], m.time_unit)
        if event_ms is not None:
            event["event_ts"] = event_ms
        for target, source, kind, scale in self.targets:
            value = row[source]
            value = _convert(value, kind, scale) if kind is not None else _number_scaled(value, scale)
            if value is not None:
                event[target] = value
        if m.action:
            value = row[m.action]
            if value is not None:
                flags = m.action_flags.get(action_key(value))
                if flags is None:
                    if m.unknown_action == "error":
                        raise ImportDataError(
                            f"action = {m.action!r}: value {value!r} (event {position}) is not in action_flags "
                            f"{sorted(m.action_flags)}; set unknown_action: skip or null to import it anyway"
                        )
                    if m.unknown_action == "skip":
                        return None
                else:
                    event[m.action_column] = flags
        content = _dumps(event)
        given = row[m.event_id] if m.event_id else None
        identifier = event_id(content, self.id_scheme) if given is None else str(given)
        payload = '{"event_id":' + _dumps(identifier) + "," + content[1:]
        arrival = _time_ms(row[m.arrival_time], m.time_unit) if m.arrival_time else event_ms
        return self._partition(user), event_ms, arrival, payload
