"""The set-based validation (`seqlake.pipelines.ingest.validation`) gives exactly the reference's rows.

Payloads are drawn to hit every quarantine reason and the corners between them: NaN and Infinity, lone
surrogates, nesting around the depth limit, integers and floats beyond each width, strings at and past
their maximum length, payloads past the size limit, missing, extra and repeated keys, wrong JSON types,
non-object JSON, numeric strings, `1.0` against `1`, exponents, numbers and keys past the read limits,
unreadable lines, nulls and event times out of range. For each batch, DuckDB's rows (every column, every
reason) must equal `parse_batch`'s, the reference applied record by record; Spark's rows must equal them
on a few hundred of those payloads, in one DataFrame.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.core.config import Config, load_config
from seqlake.core.events import MAX_EVENT_TS_MS, MIN_EVENT_TS_MS, PAYLOAD_KEYS, RAW_SCHEMA
from seqlake.core.payload import (
    INT_RANGES,
    MAX_KEY_UTF16_UNITS,
    MAX_NESTING_DEPTH,
    MAX_NUMBER_CHARS,
    MAX_PAYLOAD_BYTES,
    REASONS,
    unreadable_line_payload,
)
from seqlake.pipelines.ingest.duckdb import BatchValidator
from seqlake.pipelines.ingest.parse import parse_batch
from seqlake.pipelines.ingest.spark import validated_records, validation_settings
from seqlake.pipelines.landing.schema import parsed_schema

CONFIG = load_config()
ARRIVAL = datetime(2026, 1, 5, tzinfo=UTC)
FLOAT32_MAX = 3.4028234663852886e38


class Raw:
    """A value written into the payload exactly as this text (a number spelled `1e2`, `NaN`, ...)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _encode(value: object, ascii_only: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_encode(k, ascii_only)}: {_encode(v, ascii_only)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v, ascii_only) for v in value) + "]"
    # A lone surrogate can only be spelled as an escape: a payload's text is valid UTF-8.
    return json.dumps(value, ensure_ascii=ascii_only or _has_surrogate(value), allow_nan=True)


def _has_surrogate(value: object) -> bool:
    return isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value)


# -- values ------------------------------------------------------------------------------------------


def mostly(usual: st.SearchStrategy, *rare: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` nine times in ten, else one of `rare`: most payloads get far enough to meet the later rules."""
    unusual = st.one_of(*rare)
    return st.sampled_from(range(10)).flatmap(lambda i: usual if i else unusual)


texts = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=6),
    st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "\ud83d", "é", "🙂", "\\", '"', "\\ud800", "\u0000", ""]),
    st.builds(lambda c, n: c * n, st.sampled_from(["s", "é", "🙂", "\ud800"]), st.integers(0, 40)),
)


def ints_near(low: int, high: int) -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from([low, high, low - 1, high + 1, 0, -1, 1, 2**63, 2**64, -(2**63) - 1, 10**30]),
        st.integers(low, high),
    )


plain_numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.sampled_from([FLOAT32_MAX, -FLOAT32_MAX, 3.5e38, 1e-45, 1e-50, -0.0, 0.0, 1.0, 1.5, 1e308]),
    st.sampled_from(
        ["1.0", "1e2", "1E2", "-0", "-0.0", "1e400", "-1e400", "1e-400", "2.5e+3", "0.1e1", "10" + "0" * 400]
    ).map(Raw),
)
numbers = st.one_of(
    plain_numbers,
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "inf"]).map(Raw),
    st.sampled_from(
        [
            "9" * MAX_NUMBER_CHARS,
            "9" * (MAX_NUMBER_CHARS + 1),
            "-" + "9" * (MAX_NUMBER_CHARS - 1),
            "-" + "9" * MAX_NUMBER_CHARS,
            "1." + "1" * (MAX_NUMBER_CHARS - 2),
            "1." + "1" * (MAX_NUMBER_CHARS - 1),
            "1" * 5000,
        ]
    ).map(Raw),
)


def nested(depth: int) -> Raw:
    """A value `depth` levels deep, objects and arrays in turn."""
    opening = "".join("[" if level % 2 else '{"n": ' for level in range(depth))
    closing = "".join("]" if level % 2 else "}" for level in reversed(range(depth)))
    return Raw(opening + "1" + closing)


odd_values = st.one_of(
    st.none(),
    st.booleans(),
    texts,
    numbers,
    st.integers(-(10**20), 10**20),
    st.builds(str, st.integers(-1000, 10**13)),  # numeric strings
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
    st.sampled_from([MAX_NESTING_DEPTH - 2, MAX_NESTING_DEPTH - 1, MAX_NESTING_DEPTH, 1200]).map(nested),
    st.sampled_from(["[NaN]", "[1,]", '{"a": 1, "a": 2}', '{"a": [1, {"b": Infinity}]}', "[[[]]]"]).map(Raw),
)


def column_values(kind: str, max_length: int | None) -> st.SearchStrategy:
    if kind in INT_RANGES:
        typed = ints_near(*INT_RANGES[kind])
    elif kind.startswith("float"):
        typed = st.one_of(plain_numbers, st.integers(-(2**70), 2**70))
    elif kind == "bool":
        typed = st.booleans()
    else:
        limit = max_length or 40
        typed = st.one_of(
            texts, st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "🙂"]), st.integers(limit - 1, limit + 1))
        )
    return mostly(typed, odd_values)


@st.composite
def events(draw: st.DrawFn, config: Config = CONFIG) -> dict:
    group = draw(st.sampled_from(list(config.feature_groups)))
    spec = config.feature_groups[group].columns
    event: dict[str, object] = {
        "event_id": draw(mostly(st.builds(lambda n: f"e{n}", st.integers(0, 99)), texts, odd_values)),
        "user_id": draw(mostly(st.integers(0, 10**7), ints_near(0, INT_RANGES["int64"][1]), odd_values)),
        "feature_group": draw(mostly(st.just(group), st.sampled_from(["clicks", "", 7]), odd_values)),
        "event_ts": draw(
            mostly(
                st.integers(MIN_EVENT_TS_MS, MAX_EVENT_TS_MS),
                st.sampled_from([MIN_EVENT_TS_MS - 1, MAX_EVENT_TS_MS + 1, 1767571200, 2**64, -5]),
                odd_values,
            )
        ),
    }
    for name, column in spec.items():
        if draw(st.booleans()):
            event[name] = draw(column_values(column.type, column.max_length))
    others = [c for c in config.column_types() if c not in spec]
    extra = draw(
        mostly(
            st.just([]), st.lists(st.sampled_from([*others, "color", "unreadable_line", "user_id\u0000"]), max_size=2)
        )
    )
    for name in extra:
        event[name] = draw(odd_values)
    for name in draw(mostly(st.just([]), st.lists(st.sampled_from(PAYLOAD_KEYS), max_size=2))):
        event.pop(name, None)
    return event


# -- payload texts -----------------------------------------------------------------------------------


@st.composite
def payloads(draw: st.DrawFn) -> str:
    event = draw(events())
    text = _encode(event, ascii_only=draw(st.booleans()))
    twist = draw(
        st.sampled_from(
            ["none"] * 8
            + ["duplicate", "truncate", "trailing_comma", "array", "scalar", "spaces", "form_feed", "second_value"]
            + ["huge_string", "huge_padding", "long_key", "unreadable", "lone_key", "nested_duplicate"]
        )
    )
    if twist == "duplicate" and event:
        key = draw(st.sampled_from(list(event)))
        return text[:-1] + f", {json.dumps(key)}: {_encode(draw(odd_values), True)}}}"
    if twist == "truncate":
        return text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    if twist == "trailing_comma":
        return text[:-1] + ",}"
    if twist == "array":
        return f"[{text}]"
    if twist == "scalar":
        return draw(st.sampled_from(["1", '"x"', "null", "true", "", " ", "{}", "[]"]))
    if twist == "spaces":
        return f" \t\n{text}\r\n "
    if twist == "form_feed":
        return text + "\x0c"
    if twist == "second_value":
        return text + draw(st.sampled_from([" {}", " x", "1", ' "x"']))
    if twist == "huge_string":
        event["device"] = "x" * draw(st.sampled_from([MAX_PAYLOAD_BYTES - 400, MAX_PAYLOAD_BYTES + 1]))
        return _encode(event, True)
    if twist == "huge_padding":
        return "{" + " " * draw(st.sampled_from([MAX_PAYLOAD_BYTES - len(text), MAX_PAYLOAD_BYTES])) + text[1:]
    if twist == "long_key":
        key = draw(st.sampled_from(["k", "🙂"])) * draw(
            st.sampled_from([MAX_KEY_UTF16_UNITS // 2, MAX_KEY_UTF16_UNITS // 2 + 1, MAX_KEY_UTF16_UNITS + 1])
        )
        inner = draw(st.booleans())
        return text[:-1] + (f', "n": {{{json.dumps(key)}: 1}}}}' if inner else f", {json.dumps(key)}: 1}}")
    if twist == "unreadable":
        return unreadable_line_payload(draw(texts.filter(lambda t: not _has_surrogate(t))))  # a line read is UTF-8
    if twist == "lone_key":
        return text[:-1] + f", {json.dumps(draw(texts))}: 1}}"
    if twist == "nested_duplicate":
        return text[:-1] + ', "currency": {"a": 1, "a": 2}}'
    return text


def raw_batch(texts_: list[str]) -> pa.RecordBatch:
    count = len(texts_)
    return pa.RecordBatch.from_pydict(
        {
            "source_partition": pa.array([i % 3 for i in range(count)], pa.int32()),
            "lsn": pa.array(range(count), pa.int64()),
            "arrival_ts": pa.array(
                [ARRIVAL + timedelta(minutes=37 * i) - timedelta(days=20_000 * (i % 7 == 6)) for i in range(count)],
                pa.timestamp("ms", tz="UTC"),
            ),
            "payload": pa.array(texts_, pa.string()),
        },
        schema=RAW_SCHEMA,
    )


def same_rows(got: pa.Table, expected: pa.Table) -> None:
    """Every column of every row equal, floats to the bit (`-0.0` is not `0.0`)."""
    assert got.schema == expected.schema
    for mine, theirs in zip(got.to_pylist(), expected.to_pylist(), strict=True):
        assert mine == theirs, (theirs["payload"], mine["reason"], theirs["reason"])
        for name, value in theirs.items():
            if isinstance(value, float):
                assert math.copysign(1, mine[name]) == math.copysign(1, value), (name, theirs)


@pytest.fixture(scope="module")
def validate():
    validator = BatchValidator(CONFIG)
    yield validator
    validator.close()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(payloads(), min_size=1, max_size=12))
def test_duckdb_gives_the_reference_rows(validate, texts_: list[str]) -> None:
    batch = raw_batch(texts_)
    same_rows(validate(batch), pa.Table.from_batches([parse_batch(batch, CONFIG)]))


# Each reason's typical payload, and the corners the reference's docstring names: one batch.
def with_(**changes: object) -> str:
    event = {"event_id": "e1", "user_id": 7, "feature_group": "purchase", "event_ts": MIN_EVENT_TS_MS, "item_id": 1}
    return _encode({k: v for k, v in {**event, **changes}.items() if v is not ...}, True)


CORNERS = {
    with_(): None,
    with_(price_cents=Raw("NaN")): "invalid_json",
    with_() + " x": "invalid_json",  # a reader may stop after the object: JSON does not
    with_()[:-1] + ",}": "invalid_json",
    with_(currency="\ud800") + "\x0c": "invalid_json",
    with_(n=nested(MAX_NESTING_DEPTH - 1)): "unknown_column",
    with_(n=nested(MAX_NESTING_DEPTH)): "invalid_json",
    with_(n=['\\"' * 10_000]): "unknown_column",  # a long string of escapes, in a payload checked exactly
    with_(price_cents=Raw("9" * MAX_NUMBER_CHARS)): "wrong_type",
    with_(price_cents=Raw("9" * (MAX_NUMBER_CHARS + 1))): "invalid_json",
    with_()[:-1] + ', "user_id": 8}': "duplicate_key",
    unreadable_line_payload("a,b"): "unreadable_line",
    with_(user_id=...): "missing_user_id",
    with_(user_id="7"): "bad_user_id",
    with_(feature_group="clicks"): "unknown_feature_group",
    with_(event_ts=None): "missing_event_ts",
    with_(event_ts=MAX_EVENT_TS_MS + 1): "event_ts_out_of_range",
    with_(event_ts=2**64): "event_ts_out_of_range",
    with_(event_ts=Raw("1.0")): "wrong_type",
    with_(quantity=Raw("1.0")): "wrong_type",
    with_(currency="\ud800"): "invalid_utf8",
    with_(currency="EURO"): "oversize_value",
    with_(currency=None): None,  # JSON's null is no value, not the four characters `null`
    with_(currency="€" * MAX_PAYLOAD_BYTES): "oversize_value",
    with_(color="red"): "unknown_column",
}


def test_every_reason_is_reached_as_the_reference_reaches_it(validate) -> None:
    batch = raw_batch(list(CORNERS))
    got = validate(batch)
    assert got["reason"].to_pylist() == list(CORNERS.values())
    assert set(CORNERS.values()) == {None, *REASONS}
    same_rows(got, pa.Table.from_batches([parse_batch(batch, CONFIG)]))


def drawn(count: int) -> list[str]:
    """`count` payloads of the strategy above, the same ones on every run."""
    found: list[str] = []

    @settings(max_examples=count, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(payloads())
    def collect(text: str) -> None:
        found.append(text)

    collect()
    return found


@pytest.mark.spark
def test_spark_gives_the_reference_rows(spark) -> None:
    batch = raw_batch([*CORNERS, *drawn(300)])
    with validation_settings(spark):
        got = validated_records(spark, CONFIG, spark.createDataFrame(pa.Table.from_batches([batch]))).toArrow()
    got = got.sort_by("lsn").cast(parsed_schema(CONFIG))
    same_rows(got, pa.Table.from_batches([parse_batch(batch, CONFIG)]))
