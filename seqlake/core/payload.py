"""Validation of one raw payload: the reference semantics every ingest path must reproduce.

A payload is a JSON object with the keys in ``events.PAYLOAD_KEYS`` plus the columns of its feature
group. ``validate_payload`` returns the typed event or the first reason it is malformed, checked in
the order of ``REASONS`` so that a payload with several defects always gets the same reason.

Strict by design: ``user_id`` and ``event_ts`` must be JSON integers (a numeric string is rejected),
integers must fit the declared width, floats must be finite and fit the declared width, strings must be
JSON strings. A missing or non-string ``event_id`` counts as ``wrong_type``. Attribute columns may be
absent or null. Every string must be encodable as UTF-8: JSON can spell a lone surrogate (``"\\ud800"``)
that no Parquet file, Arrow array or Spark row can hold (``invalid_utf8``). Every value that passes fits
its column in every later stage, so a bad value is quarantined here instead of stopping a job later.

A key that appears twice in the payload object is ``duplicate_key``, whatever the values: JSON leaves
duplicates undefined (parsers keep the first, the last or fail), so no reading of such a payload is
the one its sender meant. An event time must lie within ``events.min_event_time`` ..
``events.max_event_time`` of the configuration (``event_ts_out_of_range``). A line an import could not
read (a CSV line with the wrong number of fields) arrives as ``{"unreadable_line": <its text>}``
(`unreadable_line_payload`) and is quarantined as ``unreadable_line``, its text kept.

What a payload must be before it is read at all, rules that hold alike for this function and the set-based
validation both ingest engines run (`seqlake.pipelines.ingest.validation`), where parsers would otherwise
differ (Python's recursion and integer-digit limits, Jackson's limits on Spark):

- a payload larger than ``MAX_PAYLOAD_BYTES`` (UTF-8) is ``oversize_value`` before it is parsed;
- ``invalid_json``: anything RFC 8259 forbids (NaN, Infinity, trailing commas, a second value after
  the object), a top level that is not an object, nesting deeper than ``MAX_NESTING_DEPTH`` levels
  (the payload object is level 1), a number written with more than ``MAX_NUMBER_CHARS`` characters
  (its sign included), and an object key (at any level) longer than ``MAX_KEY_UTF16_UNITS`` UTF-16
  code units.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from seqlake.core.config import Config

# Reasons in priority order: the first that applies is the one reported.
REASONS = (
    "invalid_json",
    "duplicate_key",
    "unreadable_line",
    "missing_user_id",
    "bad_user_id",
    "unknown_feature_group",
    "missing_event_ts",
    "event_ts_out_of_range",
    "wrong_type",
    "invalid_utf8",
    "oversize_value",
    "unknown_column",
)

# A payload larger than this (UTF-8 bytes) is rejected as oversize_value, whatever its columns.
MAX_PAYLOAD_BYTES = 64 * 1024
# Limits of what is read as JSON at all (see the module docstring); beyond them a payload is invalid_json.
MAX_NESTING_DEPTH = 64
MAX_NUMBER_CHARS = 1000
MAX_KEY_UTF16_UNITS = 50_000  # Jackson's limit on a name (Spark's parser); no column name comes near it

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_FLOAT32_MAX = 3.4028234663852886e38


# The payload of a line an import could not read: this key alone, the line's text its value.
UNREADABLE_LINE_KEY = "unreadable_line"


def _reject_constant(name: str) -> float:
    # NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise ValueError(f"non-standard JSON constant {name}")


class _DuplicateKeys(dict):
    """A JSON object in which some key appeared more than once (the later value kept)."""


def _utf16_units(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _object(pairs: list[tuple[str, Any]]) -> dict:
    if any(len(key) > MAX_KEY_UTF16_UNITS // 2 and _utf16_units(key) > MAX_KEY_UTF16_UNITS for key, _ in pairs):
        raise ValueError("object key too long")
    found = dict(pairs)
    return found if len(found) == len(pairs) else _DuplicateKeys(found)


def _number(parse: Any) -> Any:
    def read(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError("number too long")
        return parse(text)

    return read


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def _nesting_depth(text: str) -> int:
    """Levels of objects and arrays in JSON `text` (``{}`` is 1), every value counted, a key's
    repeated values too."""
    depth = level = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            level += 1
            depth = max(depth, level)
        elif char in "]}":
            level -= 1
    return depth


# Which users a raw payload names, as far as one can be read from it (quarantined payloads: `seqlake
# forget` removes those naming a forgotten user). Every complete value of a `"user_id"` key in the
# text, whether the payload parses or not (a truncated payload names the user if the cut came after
# the value; a key given twice names both), and in each value every run of digits read as an integer:
# 1000031, "1000031", "u1000031x" and -1000031 all name user 1000031; a missing or null id, or a
# value cut off by the truncation, names nobody. Broad on purpose: a quarantined record is not valid
# data, and one that may be the user's goes with them. Regular expressions Python and Java (Spark)
# read alike: `seqlake.pipelines.forget.remove` runs the same two on Spark.
USER_ID_VALUE = r'"user_id"[ \t\r\n]*:[ \t\r\n]*("[^"]*"|[^,}" \t\r\n]+)[ \t\r\n]*[,}]'
DIGIT_RUN = "[0-9]+"


def named_user_ids(payload: str) -> set[int]:
    """The user ids a raw payload names (see `USER_ID_VALUE`): the reference of forget's selection."""
    found = set()
    for value in re.findall(USER_ID_VALUE, payload):
        for digits in re.findall(DIGIT_RUN, value):
            if int(digits) <= INT_RANGES["int64"][1]:
                found.add(int(digits))
    return found


# One decoder for every payload (json.loads with options builds a new one per call).
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_reject_constant, parse_int=_number(int), parse_float=_number(float)
)


def unreadable_line_payload(text: str) -> str:
    """The raw payload of a source line that could not be read: its text, kept, in an object that
    `validate_payload` quarantines as ``unreadable_line``."""
    return json.dumps({UNREADABLE_LINE_KEY: text}, ensure_ascii=False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _typed(value: Any, kind: str) -> tuple[bool, Any]:
    """(ok, python value) for one attribute value of declared type ``kind``."""
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return (_is_int(value) and low <= value <= high), value
    if kind in ("float32", "float64"):
        if not (_is_int(value) or isinstance(value, float)):
            return False, None
        try:
            number = float(value)
        except OverflowError:  # an integer beyond every float (1e400 written out)
            return False, None
        limit = _FLOAT32_MAX if kind == "float32" else math.inf
        return (math.isfinite(number) and abs(number) <= limit), number
    if kind == "bool":
        return isinstance(value, bool), value
    return isinstance(value, str), value  # string


def _utf8(value: Any) -> bool:
    """A string Parquet, Arrow and Spark can store: encodable as UTF-8 (no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_payload(payload: str, config: Config) -> tuple[dict | None, str | None]:
    """Return (event dict with typed python values, None) or (None, reason).

    The event dict has ``event_id``, ``user_id``, ``feature_group``, ``event_ts`` (epoch ms) and
    every column of the feature group (None when absent).
    """
    if len(payload) > MAX_PAYLOAD_BYTES // 4 and len(payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        return None, "oversize_value"
    try:
        data = _DECODER.decode(payload)
    except (ValueError, RecursionError):  # RecursionError: nested far beyond MAX_NESTING_DEPTH
        return None, "invalid_json"
    if not isinstance(data, dict):
        return None, "invalid_json"
    if payload.count("[") + payload.count("{") > MAX_NESTING_DEPTH and _nesting_depth(payload) > MAX_NESTING_DEPTH:
        return None, "invalid_json"
    if isinstance(data, _DuplicateKeys):
        return None, "duplicate_key"
    if len(data) == 1 and isinstance(data.get(UNREADABLE_LINE_KEY), str):
        return None, "unreadable_line"

    user_id = data.get("user_id")
    if user_id is None:
        return None, "missing_user_id"
    if not _is_int(user_id) or not 0 <= user_id <= INT_RANGES["int64"][1]:
        return None, "bad_user_id"

    group = data.get("feature_group")
    if not isinstance(group, str) or group not in config.feature_groups:
        return None, "unknown_feature_group"
    columns = config.feature_groups[group].columns

    event_ts = data.get("event_ts")
    if event_ts is None:
        return None, "missing_event_ts"
    if not _is_int(event_ts):
        return None, "wrong_type"
    if not config.events.accepts(event_ts):
        return None, "event_ts_out_of_range"

    event_id = data.get("event_id")
    if not isinstance(event_id, str):
        return None, "wrong_type"
    event: dict[str, Any] = {
        "event_id": event_id,
        "user_id": user_id,
        "feature_group": group,
        "event_ts": event_ts,
    }
    for name, spec in columns.items():
        value = data.get(name)
        if value is not None:
            ok, value = _typed(value, spec.type)
            if not ok:
                return None, "wrong_type"
        event[name] = value
    if not all(_utf8(v) for v in event.values() if isinstance(v, str)):
        return None, "invalid_utf8"

    for name, spec in columns.items():
        value = event[name]
        if spec.max_length is not None and value is not None and len(value) > spec.max_length:
            return None, "oversize_value"

    if any(key not in event for key in data):
        return None, "unknown_column"
    return event, None
