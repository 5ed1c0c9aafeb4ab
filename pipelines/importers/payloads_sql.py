"""Source rows -> raw record payloads, set-based: one DuckDB statement per batch of source rows.

The statement writes, byte for byte, the payloads of the per-row reference (`payloads.EventMapper`):
the same conversions by column type (numeric text such as "0104257" is the number it spells, a
scaled float is cleaned to 15 significant digits, "true"/"1" are booleans, ISO 8601 text and epoch
numbers in s/ms/us are times), the same JSON (Python's encoding: keys in mapping order, floats in
their shortest form, NaN and Infinity spelled so, non-ASCII characters as they are) and the same
event id over it (`ids`). Every value is decided in SQL except a few that the statement flags and
hands back to the reference, row by row: numbers written with non-ASCII digits, integers beyond 128
bits, ISO 8601 text in a form the statement does not spell out (or not a valid time), and values of
other Arrow types (lists, structs, decimals, nanosecond timestamps...). A file made of such values
is mapped at the reference's pace; any other file by DuckDB alone.

The statement gives, per source row in file order: its source partition, its event time (epoch
milliseconds, when it is an integer of 64 bits), its arrival time (when usable), its payload, and
whether its action value is unknown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import ColumnType
from seqlake.core.errors import ImportDataError
from seqlake.core.payload import INT_RANGES, unreadable_line_payload
from seqlake.engines.duckdb_session import sql_literal
from seqlake.pipelines.importers.ids import event_id, event_id_sql
from seqlake.pipelines.importers.payloads import TIME_FACTORS_MS, EventMapper, usable_time

# What Python's str.strip() removes (str.isspace): a value is read as a number or a time without it.
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"
_SPACE = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]"  # as a regex character class
_INT_RE = "[+-]?[0-9]+"
_FLOAT_RE = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
# Text Python reads as a number with digits other than ASCII ones (str.isdecimal, float()).
_UNICODE_NUMBER_RE = r"[+-]?(\p{Nd}+\.?\p{Nd}*|\.\p{Nd}+)([eE][+-]?\p{Nd}+)?"
# The ISO 8601 forms spelled out here; datetime.fromisoformat reads more, which the reference reads.
_ISO_RE = (
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$"
)
_ISO_PARTS = ["y", "mo", "d", "h", "mi", "s", "f", "z"]
_TIME_BOUND = 10**30  # integer times are scaled in 128 bits: larger ones go to the reference
_OFFSET_BOUND = 2**62  # a user id offset this large: every row to the reference
_MS_PER_DAY = 86_400_000
_NULL = "NULL::VARCHAR"
_CONSTANT = "\0"  # marks a field's JSON given as text, not SQL


def _lit(value: str) -> str:
    return sql_literal(value)


def _json(value: str) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_string_sql(text: str) -> str:
    """`text` (a VARCHAR expression) as a JSON string, as Python's encoder writes it: DuckDB's
    to_json, but with Python's lower-case hex in the escapes of control characters."""
    escaped = f"CAST(to_json({text}) AS VARCHAR)"
    for code in (0x0B, 0x0E, 0x0F, *range(0x1A, 0x20)):
        escaped = f"replace({escaped}, '\\u{code:04X}', '\\u{code:04x}')"
    return f"""CASE WHEN regexp_matches({text}, '[\\x00-\\x1f"\\\\]') THEN {escaped} ELSE '"' || {text} || '"' END"""


def json_float_sql(value: str) -> str:
    """A DOUBLE as Python's encoder writes a float (DuckDB's shortest spelling is Python's repr)."""
    return (
        f"CASE WHEN isnan({value}) THEN 'NaN' WHEN {value} = 'inf'::DOUBLE THEN 'Infinity' "
        f"WHEN {value} = '-inf'::DOUBLE THEN '-Infinity' ELSE CAST({value} AS VARCHAR) END"
    )


def _floor_div(value: str, divisor: int) -> str:
    """Floor division of an integer expression by a positive constant (DuckDB's // truncates)."""
    return f"((({value}) - ((({value}) % {divisor}) + {divisor}) % {divisor}) // {divisor})"


def _round_half_even(double: str) -> str:
    """Python's round() of a float, exactly (DuckDB's round_even is not, past 2**50): a tie goes to
    the even neighbour, twice the rounded half."""
    return f"CASE WHEN {double} - trunc({double}) IN (0.5, -0.5) THEN 2 * round({double} / 2) ELSE round({double}) END"


def _whole(double: str) -> str:
    return f"(isfinite({double}) AND {double} = trunc({double}))"


def _category(kind: pa.DataType) -> str:
    """How the statement reads a column of this Arrow type: text, int, float, bool, null, time
    (a timestamp, as its epoch value), date (days), or other (the reference maps its rows)."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return "text"
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_float32(kind) or pa.types.is_float64(kind):
        return "float"
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_null(kind):
        return "null"
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms", "us"):
        return "time"
    if pa.types.is_date32(kind):
        return "date"
    return "other"


def _prepared(column: pa.ChunkedArray, category: str) -> pa.ChunkedArray:
    """The column as the statement reads it."""
    if category == "time":
        return pc.cast(column, pa.int64())
    if category == "date":
        return pc.cast(column, pa.int32())
    if category == "text" and pa.types.is_string_view(column.type):
        return pc.cast(column, pa.large_string())
    if category == "other":  # TRUE where there is a value (the reference maps those rows), else NULL
        return pc.if_else(pc.is_valid(column), pa.scalar(True), pa.scalar(None, pa.bool_()))
    return column


@dataclass(frozen=True)
class _Kind:
    """What the statement knows of a source column in a batch."""

    category: str
    unit: str  # of a timestamp
    nullable: bool  # whether the batch holds NULLs in it


@dataclass(frozen=True)
class _Value:
    """A mapped value: its JSON (NULL: left out of the payload), and the rows the statement hands
    back to the reference because of it."""

    json: str
    ref: str = "false"


class _Derived:
    """Expressions computed once per row, in layers (an expression reads the layers before its own)."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = {}
        self.expressions: dict[str, str] = {}

    def add(self, name: str, expression: str) -> str:
        if name not in self.expressions:
            used = [self.levels[n] for n in re.findall(r"\b(c\d+_\w+)\b", expression) if n in self.levels]
            self.levels[name] = 1 + max(used, default=0)
            self.expressions[name] = expression
        return name

    def layers(self) -> list[list[tuple[str, str]]]:
        out: list[list[tuple[str, str]]] = [[] for _ in range(max(self.levels.values(), default=0))]
        for name, expression in self.expressions.items():
            out[self.levels[name] - 1].append((name, expression))
        return out


class _Source:
    """SQL over one source column, by its category: the reference's view of its values."""

    def __init__(self, name: str, kind: _Kind, derived: _Derived) -> None:
        self.c, self.category, self.unit, self._derived = name, kind.category, kind.unit, derived
        self.text = kind.category == "text"
        self.nullable = kind.nullable

    def _once(self, suffix: str, expression: str) -> str:
        return self._derived.add(f"{self.c}_{suffix}", expression)

    # -- what a value reads as (payloads._number) -------------------------------------------------------

    @property
    def n(self) -> str:
        """The value as a 64-bit integer, if DuckDB reads it as one (it reads more than Python does)."""
        return self._once("n", f"TRY_CAST({self.c} AS BIGINT)")

    @property
    def plain(self) -> str:
        """An integer of 64 bits as Python writes it (most values): its JSON is its text."""
        if self.text:
            return self._once("plain", f"coalesce(CAST({self.n} AS VARCHAR) = {self.c}, false)")
        return "false"

    @property
    def short(self) -> str:
        """A plain integer below 10**15: it fits 64 bits also as milliseconds of seconds."""
        if self.text:
            return self._once("short", f"({self.plain} AND abs({self.n}) < 1000000000000000)")
        return "false"

    @property
    def t(self) -> str:
        """The text without the whitespace around it."""
        spaced = f"regexp_matches({self.c}, '^{_SPACE}|{_SPACE}$')"
        stripped = f"regexp_replace({self.c}, '^{_SPACE}+|{_SPACE}+$', '', 'g')"
        return self._once("t", f"CASE WHEN NOT {self.plain} AND {spaced} THEN {stripped} ELSE {self.c} END")

    @property
    def is_int(self) -> str:
        if self.text:
            return self._once(
                "isint", f"CASE WHEN {self.plain} THEN true ELSE regexp_full_match({self.t}, '{_INT_RE}') END"
            )
        return f"({self.c} IS NOT NULL)" if self.category == "int" else "false"

    @property
    def is_float(self) -> str:
        if self.text:
            return self._once(
                "isfloat", f"CASE WHEN {self.is_int} THEN false ELSE regexp_full_match({self.t}, '{_FLOAT_RE}') END"
            )
        return f"({self.c} IS NOT NULL)" if self.category == "float" else "false"

    @property
    def is_number(self) -> str:
        return f"({self.is_int} OR {self.is_float})"

    @property
    def h(self) -> str:
        """The integer in 128 bits (NULL when the value is no integer, or one too large)."""
        if self.text:
            parsed = f"CASE WHEN {self.plain} THEN {self.n} WHEN {self.is_int} THEN TRY_CAST({self.t} AS HUGEINT) END"
            return self._once("h", parsed)
        return f"CAST({self.c} AS HUGEINT)" if self.category == "int" else "NULL::HUGEINT"

    @property
    def fd(self) -> str:
        """The float a float value (not an integer) reads as."""
        if self.text:
            return self._once("fd", f"CASE WHEN {self.is_float} THEN TRY_CAST({self.t} AS DOUBLE) END")
        return f"CAST({self.c} AS DOUBLE)" if self.category == "float" else "NULL::DOUBLE"

    @property
    def d(self) -> str:
        """The float any number reads as (Python's float(), correctly rounded)."""
        if self.text:
            from_int = f"TRY_CAST({self.t} AS DOUBLE)"
            from_int = f"CASE WHEN {from_int} = 0 THEN 0.0 ELSE {from_int} END"  # an integer has no -0.0
            return self._once("d", f"CASE WHEN {self.is_int} THEN {from_int} ELSE {self.fd} END")
        return f"CAST({self.c} AS DOUBLE)" if self.category in ("int", "float") else "NULL::DOUBLE"

    @property
    def int_text(self) -> str:
        """An integer's digits as Python writes them, exactly, whatever its size."""
        if not self.text:
            return f"CAST({self.c} AS VARCHAR)"
        t = self.t
        digits = f"ltrim(ltrim({t}, '+-'), '0')"
        spelled = f"CASE WHEN {digits} = '' THEN '0' WHEN {t}[1] = '-' THEN '-' || {digits} ELSE {digits} END"
        return f"CASE WHEN {self.plain} THEN {self.c} ELSE {spelled} END"

    def original(self) -> str:
        """The value as it is, as JSON (it read as no number)."""
        if self.text:
            return json_string_sql(self.c)
        if self.category == "bool":
            return f"CASE WHEN {self.c} THEN 'true' WHEN NOT {self.c} THEN 'false' END"
        return _NULL  # ints and floats read as numbers; other categories are the reference's

    def handed_back(self) -> str:
        """Rows the reference maps whatever the role: numbers in non-ASCII digits, values of other
        types, and timestamps and dates (but as the time: `time_ms`)."""
        if self.text:
            unicode = f"(strlen({self.t}) <> length({self.t}) AND regexp_full_match({self.t}, '{_UNICODE_NUMBER_RE}'))"
            return self._once("unicode", f"CASE WHEN {self.c} IS NULL OR {self.plain} THEN false ELSE {unicode} END")
        if self.category == "other":
            return f"coalesce({self.c}, false)"  # the column holds whether a value is there
        if self.category in ("time", "date"):
            return f"({self.c} IS NOT NULL)"
        return "false"

    def float_too_large(self) -> str:
        """An integer beyond the floats (Python's float(int) fails): the reference keeps it as it is."""
        return f"CASE WHEN {self.is_int} THEN isinf({self.d}) ELSE false END" if self.text else "false"

    # -- roles ------------------------------------------------------------------------------------------

    def as_int(self, scale: float | None) -> _Value:
        """`payloads._as_int`: an integer, or the value unchanged."""
        if self.category == "null":
            return _Value(_NULL)
        if scale is None:
            from_float = f"TRY_CAST({self.fd} AS HUGEINT)"
            json = (
                f"CASE {f'WHEN {self.plain} THEN {self.c} ' if self.text else ''}WHEN {self.c} IS NULL THEN NULL "
                f"WHEN {self.is_int} THEN {self.int_text} "
                f"WHEN {self.is_float} THEN CASE WHEN {_whole(self.fd)} THEN CAST({from_float} AS VARCHAR) "
                f"ELSE {json_float_sql(self.fd)} END ELSE {self.original()} END"
            )
            ref = f"CASE WHEN {self.is_float} THEN {_whole(self.fd)} AND {from_float} IS NULL ELSE false END"
            return _Value(json, f"({ref} OR {self.handed_back()})")
        scaled = self._scaled(scale)
        rounded = f"TRY_CAST({_round_half_even(scaled)} AS HUGEINT)"
        json = (
            f"CASE WHEN {self.c} IS NULL THEN NULL WHEN {self.is_number} THEN CASE WHEN isfinite({scaled}) "
            f"THEN CAST({rounded} AS VARCHAR) ELSE {json_float_sql(scaled)} END ELSE {self.original()} END"
        )
        ref = f"CASE WHEN {self.is_number} THEN isfinite({scaled}) AND {rounded} IS NULL ELSE false END"
        return _Value(json, f"({ref} OR {self.float_too_large()} OR {self.handed_back()})")

    def _scaled(self, scale: float) -> str:
        return self._once(f"x{_tag(scale)}", f"({self.d} * {float(scale)!r})")

    def int_value(self) -> tuple[str, str]:
        """(the value as a 128-bit integer, NULL when it is none; rows whose integer does not fit)."""
        value = (
            f"CASE WHEN {self.is_int} THEN {self.h} "
            f"WHEN {self.is_float} AND {_whole(self.fd)} THEN TRY_CAST({self.fd} AS HUGEINT) END"
        )
        return value, f"CASE WHEN {self.is_int} THEN {self.h} IS NULL ELSE false END"

    def as_float(self, scale: float | None) -> _Value:
        if self.category == "null":
            return _Value(_NULL)
        number = self.d
        if scale is not None:
            scaled = self._scaled(scale)
            cleaned = f"CASE WHEN isfinite({scaled}) THEN CAST(printf('%.15g', {scaled}) AS DOUBLE) ELSE {scaled} END"
            number = self._once(f"clean{_tag(scale)}", cleaned)
        json = (
            f"CASE WHEN {self.c} IS NULL THEN NULL WHEN {self.is_number} THEN {json_float_sql(number)} "
            f"ELSE {self.original()} END"
        )
        return _Value(json, f"({self.float_too_large()} OR {self.handed_back()})")

    def as_bool(self) -> _Value:
        if self.text:
            lowered = f"lower({self.t})"
            json = (
                f"CASE WHEN {self.c} IS NULL THEN NULL WHEN {lowered} IN ('true', '1') THEN 'true' "
                f"WHEN {lowered} IN ('false', '0') THEN 'false' ELSE {self.original()} END"
            )
        elif self.category == "int":
            json = (
                f"CASE WHEN {self.c} = 1 THEN 'true' WHEN {self.c} = 0 THEN 'false' ELSE CAST({self.c} AS VARCHAR) END"
            )
        elif self.category == "float":
            json = f"CASE WHEN {self.c} IS NULL THEN NULL ELSE {json_float_sql(self.d)} END"
        elif self.category == "bool":
            json = self.original()
        else:
            json = _NULL
        return _Value(json, self.handed_back())

    @property
    def float_text(self) -> str:
        """Python's str() of a float (DuckDB spells a NaN with its sign bit set -nan)."""
        return f"CASE WHEN isnan({self.d}) THEN 'nan' ELSE CAST({self.d} AS VARCHAR) END"

    def str_text(self) -> str:
        """Python's str() of the value."""
        if self.category in ("text", "int"):
            return self.c if self.text else f"CAST({self.c} AS VARCHAR)"
        if self.category == "float":
            return self.float_text
        if self.category == "bool":
            return f"CASE WHEN {self.c} THEN 'True' WHEN NOT {self.c} THEN 'False' END"
        return _NULL

    def as_string(self) -> _Value:
        json = f"CASE WHEN {self.c} IS NULL THEN NULL ELSE {json_string_sql(self.str_text())} END"
        return _Value(json, self.handed_back())

    def action_key(self) -> str:
        """`mapping.action_key`: the text an action value is matched by."""
        if self.category == "float":
            return (
                f"CASE WHEN {_whole(self.d)} THEN CAST(TRY_CAST({self.d} AS HUGEINT) AS VARCHAR) "
                f"ELSE {self.float_text} END"
            )
        if self.category == "bool":
            return f"CASE WHEN {self.c} THEN 'true' WHEN NOT {self.c} THEN 'false' END"
        return self.str_text()

    def time_ms(self, unit: str) -> tuple[str, _Value]:
        """`payloads._time_ms`: (the time in epoch ms as BIGINT, NULL when it is no integer of 64
        bits; its JSON value)."""
        if self.category == "null":
            return "NULL::BIGINT", _Value(_NULL)
        if self.category == "bool":
            return "NULL::BIGINT", _Value(self.original())
        if self.category == "other":
            return "NULL::BIGINT", _Value(_NULL, self.handed_back())
        if self.category in ("time", "date"):
            ms = self._once("ms", f"TRY_CAST({self._native_ms()} AS BIGINT)")
            return ms, _Value(f"CAST({ms} AS VARCHAR)", f"({self.c} IS NOT NULL AND {ms} IS NULL)")
        h = self.h
        from_int = {"s": f"{h} * 1000", "ms": h, "us": _floor_div(h, 1000)}[unit]
        from_int = f"CASE WHEN abs({h}) < {_TIME_BOUND} THEN {from_int} END"
        scaled = self._once(f"tx{unit}", f"({self.fd} * {float(TIME_FACTORS_MS[unit])!r})")
        from_float = f"CASE WHEN isfinite({scaled}) THEN TRY_CAST({_round_half_even(scaled)} AS HUGEINT) END"
        number = (
            f"TRY_CAST(CASE WHEN {self.is_int} THEN {from_int} WHEN {self.is_float} THEN {from_float} END AS BIGINT)"
        )
        if self.text:  # most times: a plain integer, scaled in 64 bits
            quick = {"s": f"{self.n} * 1000", "ms": self.n, "us": _floor_div(self.n, 1000)}[unit]
            number = f"CASE WHEN {self.short} THEN {quick} ELSE {number} END"
        number_ms = self._once(f"ms{unit}", number)
        # an integer time beyond 64 bits (or beyond 128 before scaling): the reference's
        readable = f"{self.is_int} OR ({self.is_float} AND isfinite({scaled}))"
        number_ref = f"CASE WHEN {readable} THEN {number_ms} IS NULL ELSE false END"
        if self.category == "int":
            return number_ms, _Value(f"CAST({number_ms} AS VARCHAR)", number_ref)
        if self.category == "float":  # NaN, the infinities and what overflows stay as they are
            json = (
                f"CASE WHEN {number_ms} IS NOT NULL THEN CAST({number_ms} AS VARCHAR) "
                f"WHEN {self.c} IS NOT NULL THEN {json_float_sql(self.d)} END"
            )
            return number_ms, _Value(json, number_ref)
        iso_ms, iso_ref = self._iso_ms()
        value = self._once(f"time{unit}", f"coalesce({number_ms}, CASE WHEN NOT {self.is_number} THEN {iso_ms} END)")
        json = (
            f"CASE WHEN {value} IS NOT NULL THEN CAST({value} AS VARCHAR) WHEN {self.c} IS NULL THEN NULL "
            f"ELSE {self.original()} END"
        )
        ref = f"({number_ref} OR CASE WHEN {self.is_number} THEN false ELSE {iso_ref} END OR {self.handed_back()})"
        return value, _Value(json, ref)

    def _native_ms(self) -> str:
        value = f"CAST({self.c} AS HUGEINT)"
        if self.category == "date":
            return f"{value} * {_MS_PER_DAY}"
        return {"s": f"{value} * 1000", "ms": value, "us": _floor_div(value, 1000)}[self.unit]

    def _iso_ms(self) -> tuple[str, str]:
        """(epoch ms of ISO 8601 text of the forms spelled out, NULL otherwise; text Python may read
        as a time in other forms, or may not read: the reference's)."""
        parts = self._once(
            "iso", f"CASE WHEN NOT {self.is_number} THEN regexp_extract({self.t}, {_lit(_ISO_RE)}, {_ISO_PARTS!r}) END"
        )

        def part(name: str) -> str:
            return f"TRY_CAST(nullif({parts}.{name}, '') AS INTEGER)"

        y, mo, d = part("y"), part("mo"), part("d")
        h, mi, s = (f"coalesce({part(n)}, 0)" for n in ("h", "mi", "s"))
        micro = f"coalesce(TRY_CAST(nullif(rpad({parts}.f, 6, '0'), '') AS BIGINT), 0)"
        zone = f"{parts}.z"
        zone_h, zone_m = f"TRY_CAST({zone}[2:3] AS INTEGER)", f"TRY_CAST({zone}[5:6] AS INTEGER)"
        sign = f"CASE WHEN {zone}[1] = '-' THEN -1 ELSE 1 END"
        offset_min = f"CASE WHEN {zone} IN ('', 'Z') THEN 0 ELSE {sign} * ({zone_h} * 60 + {zone_m}) END"
        zone_valid = f"({zone} IN ('', 'Z') OR ({zone_h} < 24 AND {zone_m} < 60))"
        leap = f"(({y} % 4 = 0 AND {y} % 100 <> 0) OR {y} % 400 = 0)"
        february = f"CASE WHEN {leap} THEN 29 ELSE 28 END"
        month_days = f"CASE WHEN {mo} IN (4, 6, 9, 11) THEN 30 WHEN {mo} = 2 THEN {february} ELSE 31 END"
        valid = self._once(
            "isovalid",
            f"CASE WHEN {parts} IS NULL THEN false ELSE coalesce({parts}.y <> '' AND {y} >= 1 AND {mo} BETWEEN 1 "
            f"AND 12 AND {d} BETWEEN 1 AND {month_days} AND {h} < 24 AND {mi} < 60 AND {s} < 60 AND {zone_valid}, "
            "false) END",
        )
        # days since 1970-01-01 of a proleptic Gregorian date (years from 1)
        year = f"({y} - CASE WHEN {mo} <= 2 THEN 1 ELSE 0 END)"
        era = f"({year} // 400)"
        yoe = f"({year} - {era} * 400)"
        doy = f"((153 * ({mo} + CASE WHEN {mo} > 2 THEN -3 ELSE 9 END) + 2) // 5 + {d} - 1)"
        days = f"({era} * 146097 + {yoe} * 365 + {yoe} // 4 - {yoe} // 100 + {doy} - 719468)"
        micros = (
            f"(CAST({days} AS HUGEINT) * 86400000000 "
            f"+ CAST({h} * 3600 + {mi} * 60 + {s} - {offset_min} * 60 AS HUGEINT) * 1000000 + {micro})"
        )
        ms = f"CASE WHEN {valid} THEN CAST({_floor_div(micros, 1000)} AS BIGINT) END"
        like_a_year = f"regexp_matches({self.t}, '^\\p{{Nd}}{{4}}')"
        return ms, f"(NOT {valid} AND {like_a_year})"


def _tag(scale: float) -> str:
    return re.sub(r"[^0-9a-z]", "_", repr(float(scale)))


# -- a batch --------------------------------------------------------------------------------------------------


@dataclass
class MappedBatch:
    """A batch's records in file order (skipped rows left out), and what the import's stats count."""

    seq: pa.Array  # int64: the source row's position in the file
    partition: pa.Array  # int32
    arrival: pa.Array  # int64; NULL: no usable arrival time of its own
    payload: pa.Array  # string
    event_ms: pa.Array  # int64: the event times of the records the statement mapped (NULL: no integer)
    handed_back_ms: list[Any]  # the event times of the records the reference mapped (any value)
    rows: int  # source rows read (not unreadable lines)
    unreadable: int
    skipped: int


class BatchMapper:
    """`mapper`'s mapping as one DuckDB statement over a batch of source rows: the columns of
    `mapper.source_columns()`, `_seq` (position in the file) and `_raw` (the text of an unreadable
    line, else NULL), on `connection`."""

    def __init__(self, mapper: EventMapper, connection: Any) -> None:
        self.mapper = mapper
        self.con = connection
        self._statements: dict[tuple[_Kind, ...], str] = {}

    def map(self, table: pa.Table) -> MappedBatch:
        names = self.mapper.source_columns()
        kinds = []
        for name in names:
            column = table.column(name)
            category = _category(column.type)
            unit = column.type.unit if category == "time" else ""
            kinds.append(_Kind(category, unit, column.null_count > 0))
        key = tuple(kinds)
        if key not in self._statements:
            self._statements[key] = self.statement(kinds)
        columns = {
            f"c{i}": _prepared(table.column(n), k.category) for i, (n, k) in enumerate(zip(names, kinds, strict=True))
        }
        columns["_seq"] = table.column("_seq")
        columns["_raw"] = table.column("_raw")
        self.con.register("_source_rows", pa.table(columns))
        try:
            out = self.con.execute(self._statements[key]).to_arrow_table().combine_chunks()
        finally:
            self.con.unregister("_source_rows")
        return self._finish(table, out)

    def _finish(self, source: pa.Table, out: pa.Table) -> MappedBatch:
        """Unreadable lines' payloads, the rows handed back to the reference, unknown actions."""
        mapper, m = self.mapper, self.mapper.mapping
        seq = out.column("_seq").to_numpy()
        if not np.array_equal(seq, source.column("_seq").to_numpy()):  # DuckDB keeps the order; in case
            out = out.take(np.argsort(seq, kind="stable"))
            seq = out.column("_seq").to_numpy()

        def flags(name: str) -> np.ndarray:
            return out.column(name).to_numpy(zero_copy_only=False).astype(bool)

        raw, ref, unknown = flags("raw"), flags("ref"), flags("unknown")
        keep = ~unknown if m.unknown_action == "skip" else np.ones(len(seq), dtype=bool)
        first_unknown = int(seq[unknown][0]) if m.unknown_action == "error" and unknown.any() else None
        python = raw | ref
        handed_back_ms: list[Any] = []
        partition, arrival = out.column("partition").combine_chunks(), out.column("arrival").combine_chunks()
        payload = out.column("payload").combine_chunks()
        if mapper.id_scheme != 2 or python.any():
            texts = payload.to_pylist()
            if mapper.id_scheme != 2:
                self._add_ids(texts, out.column("given_id").to_pylist(), python)
            parts, arrivals = partition.to_pylist(), arrival.to_pylist()
            for i in map(int, python.nonzero()[0]):
                if raw[i]:
                    texts[i] = unreadable_line_payload(source.column("_raw")[i].as_py())
                    continue
                if first_unknown is not None and seq[i] > first_unknown:
                    break  # the unknown action before it stops the import
                mapped = mapper.event({n: source.column(n)[i].as_py() for n in mapper.source_columns()}, int(seq[i]))
                if mapped is None:  # an unknown action, skipped
                    keep[i] = False
                    continue
                parts[i], event_ms, arrival_value, texts[i] = mapped
                arrivals[i] = self._arrival(event_ms, arrival_value)
                handed_back_ms.append(event_ms)
            payload = pa.array(texts, pa.string())
            partition, arrival = pa.array(parts, pa.int32()), pa.array(arrivals, pa.int64())
        if first_unknown is not None:
            self._refuse_action(source, first_unknown)
        event_ms = out.column("event_ms").combine_chunks()
        columns = [out.column("_seq").combine_chunks(), partition, arrival, payload]
        if not keep.all():
            mask = pa.array(keep)
            columns = [pc.filter(column, mask) for column in columns]
        if python.any() or not keep.all():
            event_ms = pc.filter(event_ms, pa.array(keep & ~python))
        return MappedBatch(
            seq=columns[0],
            partition=columns[1],
            arrival=columns[2],
            payload=columns[3],
            event_ms=event_ms,
            handed_back_ms=handed_back_ms,
            rows=len(seq) - int(raw.sum()),
            unreadable=int(raw.sum()),
            skipped=int((~keep).sum()),
        )

    def _arrival(self, event_ms: Any, arrival_value: Any) -> int | None:
        events = self.mapper.events
        arrival = usable_time(arrival_value, events)
        if arrival is None and self.mapper.mapping.arrival_time:
            arrival = usable_time(event_ms, events)
        return arrival

    def _add_ids(self, texts: list, given: list, python: np.ndarray) -> None:
        """A scheme DuckDB has no hash for (1, BLAKE2b): the statement gave the content; the id is
        added here."""
        scheme = self.mapper.id_scheme
        for i, content in enumerate(texts):
            if content is None or python[i]:
                continue
            identifier = given[i] if given[i] is not None else '"' + event_id(content, scheme) + '"'
            texts[i] = '{"event_id":' + identifier + "," + content[1:]

    def _refuse_action(self, source: pa.Table, position: int) -> None:
        m = self.mapper.mapping
        assert m.action is not None  # only an action value is unknown
        first = int(source.column("_seq")[0].as_py())
        value = source.column(m.action)[position - first].as_py()
        raise ImportDataError(
            f"action = {m.action!r}: value {value!r} (event {position}) is not in action_flags "
            f"{sorted(m.action_flags)}; set unknown_action: skip or null to import it anyway"
        )

    # -- the statement ----------------------------------------------------------------------------------

    def statement(self, kinds: list[_Kind]) -> str:
        """The SQL over `_source_rows` for source columns of these kinds."""
        mapper = self.mapper
        m, events = mapper.mapping, mapper.events
        derived = _Derived()
        sources = {
            name: _Source(f"c{i}", kind, derived)
            for i, (name, kind) in enumerate(zip(mapper.source_columns(), kinds, strict=True))
        }
        refs: list[str] = []
        fields: list[tuple[str, str, bool]] = []  # (key, JSON value, whether it can be NULL), in order

        user = sources[m.user_column]
        user_value = user.as_int(None)
        refs.append(user_value.ref)
        user_json, partition = user_value.json, str(mapper.first_partition)
        offset, count = m.user_id_offset, m.source_partitions
        if offset or count > 1:
            number, too_large = user.int_value()
            refs.append(too_large)
            if offset:
                refs.append(f"abs({number}) > {2**120}" if offset < _OFFSET_BOUND else "true")
                number = f"({number} + {offset if offset < _OFFSET_BOUND else 0})"
                user_json = f"CASE WHEN {number} IS NOT NULL THEN CAST({number} AS VARCHAR) ELSE {user_json} END"
            if count > 1:
                partition = (
                    f"CASE WHEN {number} >= 0 THEN {mapper.first_partition} + CAST({number} % {count} AS INTEGER) "
                    f"ELSE {mapper.first_partition} END"
                )
        fields.append(("user_id", user_json, user.nullable))
        fields.append(("feature_group", _CONSTANT + _json(m.feature_group), False))
        event_ms, event_value = sources[m.time].time_ms(m.time_unit)
        refs.append(event_value.ref)
        fields.append(("event_ts", event_value.json, sources[m.time].nullable))
        for target, source_name, kind, scale in mapper.targets:
            value = _convert(sources[source_name], kind, scale)
            refs.append(value.ref)
            fields.append((target, value.json, sources[source_name].nullable))
        unknown = "false"
        if m.action:
            action = sources[m.action]
            refs.append(action.handed_back() if not action.text else "false")
            cases = " ".join(f"WHEN {_lit(k)} THEN {int(v)}" for k, v in m.action_flags.items())
            flags = derived.add(f"{action.c}_flags", f"CASE {action.action_key()} {cases} END")
            unknown = f"({action.c} IS NOT NULL AND {flags} IS NULL)"
            fields.append((m.action_column, f"CAST({flags} AS VARCHAR)", action.nullable or m.unknown_action == "null"))
        given = _NULL
        if m.event_id:
            identifier = sources[m.event_id]
            refs.append(identifier.handed_back() if not identifier.text else "false")
            given = f"CASE WHEN {identifier.c} IS NOT NULL THEN {json_string_sql(identifier.str_text())} END"
        arrival = f"CASE WHEN {event_ms} BETWEEN {events.min_event_ms} AND {events.max_event_ms} THEN {event_ms} END"
        if m.arrival_time:
            arrival_ms, arrival_value = sources[m.arrival_time].time_ms(m.time_unit)
            refs.append(arrival_value.ref)
            usable = (
                f"CASE WHEN {arrival_ms} BETWEEN {events.min_event_ms} AND {events.max_event_ms} THEN {arrival_ms} END"
            )
            arrival = f"coalesce({usable}, {arrival})"
        body = _object_body_sql(fields)  # the event's JSON object without its opening brace
        hashed = event_id_sql("concat('{', _body)", mapper.id_scheme)
        payload = "concat('{', _body)"  # the content: the id is added in Python
        if hashed is not None:
            hashed_id = f"""concat('"', {hashed}, '"')"""
            given_or_hashed = f"coalesce(_given, {hashed_id})" if m.event_id else hashed_id
            payload = f"""concat('{{"event_id":', {given_or_hashed}, ',', _body)"""
        handed_back = " OR ".join(f"coalesce({r}, false)" for r in refs if r != "false") or "false"
        relation = "_source_rows"
        for level, layer in enumerate(derived.layers()):
            listed = ", ".join(f"{expression} AS {name}" for name, expression in layer)
            relation = f"(SELECT *, {listed} FROM {relation}) AS _l{level}"
        return f"""
            SELECT _seq, partition, event_ms, arrival, unknown, ref, raw, _given AS given_id,
              CASE WHEN NOT ref AND NOT raw THEN {payload} END AS payload
            FROM (
              SELECT _seq, _raw IS NOT NULL AS raw,
                CAST({partition} AS INTEGER) AS partition,
                CASE WHEN _raw IS NULL THEN {event_ms} END AS event_ms,
                CASE WHEN _raw IS NULL THEN {arrival} END AS arrival,
                coalesce(_raw IS NULL AND {unknown}, false) AS unknown,
                coalesce(_raw IS NULL AND ({handed_back}), false) AS ref,
                CASE WHEN _raw IS NULL THEN {body} END AS _body,
                CASE WHEN _raw IS NULL THEN {given} END AS _given
              FROM {relation})"""


def _object_body_sql(fields: list[tuple[str, str, bool]]) -> str:
    """The JSON object of the fields without its opening brace (key, JSON value: SQL, or `_CONSTANT`
    and its JSON text; whether the value can be NULL: then the field is left out), as one concat.
    The feature group (second) is always there: the fields after it start with their comma, the
    first ends with one."""
    parts: list[str | tuple[str]] = []  # text, or (SQL,)

    def text(value: str) -> None:
        if parts and isinstance(parts[-1], str):
            parts[-1] += value
        else:
            parts.append(value)

    for number, (key, value, nullable) in enumerate(fields):
        head = ("," if number > 1 else "") + _json(key) + ":"
        tail = "," if number == 0 else ""
        if value.startswith(_CONSTANT):
            text(head + value.removeprefix(_CONSTANT) + tail)
        elif nullable:
            parts.append((f"coalesce({_lit(head)} || ({value}){' || ' + _lit(tail) if tail else ''}, '')",))
        else:
            text(head)
            parts.append((f"({value})",))
            if tail:
                text(tail)
    text("}")
    return "concat(" + ", ".join(_lit(p) if isinstance(p, str) else p[0] for p in parts) + ")"


def _convert(source: _Source, kind: ColumnType | None, scale: float | None) -> _Value:
    """`payloads._convert`, by the type of the target column."""
    if kind in INT_RANGES:
        return source.as_int(scale)
    if kind in ("float32", "float64"):
        return source.as_float(scale)
    if kind == "bool":
        return source.as_bool()
    return source.as_string()
