"""The set-based import gives exactly the per-row reference's records.

`payloads_sql.BatchMapper` maps a batch of source rows with one DuckDB statement; `payloads.EventMapper`
maps one row in Python and stays the reference. On hostile values (integers beyond 64 and 128 bits,
numeric text with leading zeros, signs and whitespace, NaN and the infinities, empty strings, times
that do not read, nulls, unknown actions, control characters and non-ASCII text, digits of other
scripts) and for every column type and mapping option, both give the same partition, event time,
arrival time and payload bytes, event id included. A whole file (CSV, `::` lines, JSON lines) imports
to the records the reference's rules give: arrival order, dense LSNs, the same stats.
"""

from __future__ import annotations

import csv
import io
import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.core.config import Config
from seqlake.core.errors import ImportDataError
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.payload import unreadable_line_payload
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.importers import ImportStats, import_file, parse_mapping
from seqlake.pipelines.importers.ids import event_id
from seqlake.pipelines.importers.payloads import EventMapper, out_of_range, usable_time
from seqlake.pipelines.importers.payloads_sql import WHITESPACE, BatchMapper
from tests.conftest import make_config

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
COLUMNS = ["u", "i", "t", "a", "w", "r", "b", "s", "e", "at"]

# Text as a user's file holds it: numbers in every spelling, times in several, and what is neither.
HOSTILE_TEXT = [
    "",
    " ",
    "0",
    "-0",
    "+0",
    "+5",
    "007",
    "-007",
    " 42 ",
    "\u300042\u2028",
    "\t7\x1c",
    "1e3",
    "1E-2",
    "1.5",
    ".5",
    "5.",
    "-.5e+2",
    "1e400",
    "-1e400",
    "1e-400",
    "nan",
    "NaN",
    "inf",
    "-Infinity",
    "true",
    "TRUE",
    " False ",
    "1",
    "7.0",
    "7.5",
    "1e20",
    "x7",
    "١٢٣",
    "１２",
    "٣.٥",
    "12٣",
    "0x10",
    "1_000",
    "+",
    "-",
    "e5",
    "1e",
    "--1",
    'quote"s',
    "back\\slash",
    "tab\tin",
    "line\nbreak",
    "\x00nul",
    "\x7f",
    "é",
    "😀",
    "\u2028",
    "view",
    "like",
    "2024-05-01T10:00:00Z",
    "2024-05-01 09:00:00",
    "2024-05-01",
    "2024-02-29",
    "2023-02-29",
    "2024-13-01",
    "2024-05-01T10:00:00.5+02:00",
    "2024-05-01T10:00:00.123456-05:30",
    "2024-05-01T10:00:00.1234567",
    "20240501T100000",
    "2024-05-01T24:00:00",
    "2024-05-01t10:00",
    "0000-01-01",
    "0001-01-01T00:00:00",
    "1969-12-31T23:59:59.999",
    "9999-12-31T23:59:59.999999",
    "2024-05-01T10:00+24:00",
    "2024-05-01Z",
    "2024-05-01+00:00",
    "2024-05-01T10:00:00ZZ",
    "١٩٧٠-01-01",
    "2024-05-01T10:00:60",
    " 2024-05-01T10:00:00 ",
    "1511539200",
    "1511539200000",
    "1511539200000000",
    "-1511539200",
    "1511539200.5",
    "1511539200.0000005",
    str(2**63),
    str(-(2**63) - 1),
    str(2**127),
    str(2**128),
    "9" * 45,
    "-" + "9" * 45,
    "1" + "0" * 400,
]
ISO_FORMATS = ["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M%z"]


def text_values() -> st.SearchStrategy[str | None]:
    times = st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31), timezones=st.just(UTC))
    return st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.integers(-(10**40), 10**40).map(str),
        st.tuples(st.integers(0, 3), st.integers(0, 10**12), st.sampled_from(["", "-", "+", " "])).map(
            lambda p: p[2] + "0" * p[0] + str(p[1])
        ),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(0, 4 * 10**15).map(str),
        st.tuples(times, st.sampled_from(ISO_FORMATS)).map(lambda p: p[0].strftime(p[1])),
        st.text(max_size=6),
        st.none(),
    )


NAN_WITH_SIGN = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]  # Python prints it nan
# Typed columns (Parquet, JSON lines): an Arrow type and values of it.
TYPED = {
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "float64": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True) | st.just(NAN_WITH_SIGN)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=True, allow_infinity=True)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), text_values()),
    "timestamp_ms": (pa.timestamp("ms"), st.integers(-(10**13), 10**13)),
    "timestamp_us_utc": (pa.timestamp("us", tz="UTC"), st.integers(-(10**16), 10**16)),
    "timestamp_s": (pa.timestamp("s", tz="Europe/Paris"), st.integers(-(10**10), 10**10)),
    "date32": (pa.date32(), st.integers(-700_000, 2_900_000)),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=2)),
    "decimal": (pa.decimal128(10, 2), st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False)),
    "null": (pa.null(), st.none()),
}


@st.composite
def mappings(draw: st.DrawFn) -> dict:
    data: dict[str, Any] = {
        "format": "csv",
        "user": "u",
        "item": "i",
        "time": "t",
        "time_unit": draw(st.sampled_from(["s", "ms", "us"])),
        "feature_group": "engagement",
        "action": "a",
        "action_flags": {"view": 1, "7": 2, "true": 4, "7.5": 8, "nan": 16, "": 32, "٣": 64},
        "unknown_action": draw(st.sampled_from(["null", "skip"])),
        "columns": {
            "watch_time_ms": {"source": "w", "scale": draw(st.sampled_from([None, 1000, 0.1, -2.5, 1e300]))},
            "completion_ratio": {"source": "r", "scale": draw(st.sampled_from([None, 0.1, 3.0]))},
            "is_autoplay": "b",
            "surface": "s",
            "author_id": draw(st.sampled_from(["w", "s", "e"])),
            "duration_ms": draw(st.sampled_from(["u", "t", "r"])),
        },
        "user_id_offset": draw(st.sampled_from([0, 1_000_000_000, 2**70])),
        "source_partitions": draw(st.sampled_from([1, 3])),
    }
    if draw(st.booleans()):
        data["event_id"] = "e"
    if draw(st.booleans()):
        data["arrival_time"] = "at"
    return data


@st.composite
def source_tables(draw: st.DrawFn) -> pa.Table:
    """Text columns (as CSV and .dat files hold them), or now and then columns of other types."""
    rows = draw(st.integers(1, 12))
    typed = draw(st.booleans())
    columns = {}
    for name in COLUMNS:
        kind = "string" if not typed or draw(st.integers(0, 2)) else draw(st.sampled_from(sorted(TYPED)))
        arrow_type, values = TYPED[kind]
        drawn = draw(st.lists(st.one_of(values, st.none()) if kind != "null" else values, min_size=rows, max_size=rows))
        if pa.types.is_timestamp(arrow_type) or pa.types.is_date32(arrow_type):
            storage = pa.int64() if pa.types.is_timestamp(arrow_type) else pa.int32()
            columns[name] = pa.array(drawn, storage).cast(arrow_type)
        else:
            columns[name] = pa.array(drawn, arrow_type)
    return pa.table(columns)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return make_config(tmp_path_factory.mktemp("set_based") / "warehouse")


def python_value(column: pa.ChunkedArray, index: int) -> Any:
    return column[index].as_py()


def readable_by_python(table: pa.Table) -> bool:
    """Rows the reference can see at all: pyarrow converts every value to Python."""
    try:
        table.to_pylist()
    except (ValueError, OverflowError):
        return False
    return True


def reference_rows(table: pa.Table, mapper: EventMapper) -> list[tuple | None]:
    """(partition, event time, usable arrival, payload) of each row, by the reference; None: skipped."""
    out: list[tuple | None] = []
    for seq, row in enumerate(table.to_pylist()):
        mapped = mapper.event(row, seq)
        if mapped is None:
            out.append(None)
            continue
        partition, event_ms, arrival_value, payload = mapped
        arrival = usable_time(arrival_value, mapper.events)
        if arrival is None and mapper.mapping.arrival_time:
            arrival = usable_time(event_ms, mapper.events)
        out.append((partition, event_ms, arrival, payload))
    return out


def with_positions(table: pa.Table) -> pa.Table:
    rows = table.num_rows
    return table.append_column("_raw", pa.nulls(rows, pa.string())).append_column(
        "_seq", pa.array(np.arange(rows, dtype=np.int64))
    )


def integer_times(values: list[Any]) -> list[int]:
    return sorted(v for v in values if isinstance(v, int) and not isinstance(v, bool))


@SETTINGS
@given(data=mappings(), table=source_tables(), scheme=st.sampled_from([1, 2]))
def test_each_row_maps_to_exactly_the_references_record(config: Config, data: dict, table: pa.Table, scheme: int):
    if not readable_by_python(table):
        return  # values Python cannot hold (timestamps beyond year 9999): not the reference's to map
    mapping = parse_mapping(data)
    mapper = EventMapper(mapping, config, first_partition=4, id_scheme=scheme)
    expected = reference_rows(table, mapper)
    with connect(extensions=()) as con:
        got = BatchMapper(mapper, con).map(with_positions(table))
    kept = [e for e in expected if e is not None]
    assert got.seq.to_pylist() == [seq for seq, e in enumerate(expected) if e is not None]
    assert got.skipped == len(expected) - len(kept) and got.rows == table.num_rows and got.unreadable == 0
    assert got.payload.to_pylist() == [e[3] for e in kept]
    assert got.partition.to_pylist() == [e[0] for e in kept]
    assert got.arrival.to_pylist() == [e[2] for e in kept]
    mapped_times = [v for v in got.event_ms.to_pylist() if v is not None] + list(got.handed_back_ms)
    assert integer_times(mapped_times) == integer_times([e[1] for e in kept])


def test_the_statement_strips_what_python_strips():
    assert "".join(c for c in map(chr, range(0x110000)) if c.isspace()) == WHITESPACE


def test_plain_values_are_mapped_by_the_statement_alone(config: Config):
    mapping = parse_mapping(BASE_MAPPING)
    table = pa.table(
        {"u": ["7", "-3", "0104257"], "i": ["1", "2", "3"], "t": ["1700000000", "1.7e9", "2024-05-01T10:00:00Z"]}
        | {"a": ["view", "like", "shrug"], "r": ["7", "0.5", ""]}
    )
    with connect(extensions=()) as con:
        got = BatchMapper(EventMapper(mapping, config), con).map(with_positions(table))
    assert got.handed_back_ms == [] and got.event_ms.to_pylist() == [1_700_000_000_000, 1_700_000_000_000]
    assert got.skipped == 1


def test_scheme_ids_are_the_hash_of_the_payload_content(config: Config):
    mapping = parse_mapping({**BASE_MAPPING, "action": None, "action_flags": {}, "columns": {}})
    table = pa.table({"u": ["7"], "i": ["0104257"], "t": ["1700000000"]})
    for scheme in (1, 2):
        mapper = EventMapper(mapping, config, id_scheme=scheme)
        with connect(extensions=()) as con:
            [payload] = BatchMapper(mapper, con).map(with_positions(table)).payload.to_pylist()
        content = '{"user_id":7,"feature_group":"engagement","event_ts":1700000000000,"item_id":104257}'
        assert payload == '{"event_id":"' + event_id(content, scheme) + '",' + content[1:]
        assert json.loads(payload)["event_id"] != event_id(content, 3 - scheme)


def test_an_unknown_action_stops_the_import_at_the_first_one_in_file_order(config: Config):
    mapping = parse_mapping({**BASE_MAPPING, "unknown_action": "error", "columns": {}})
    # the first unknown value is one the statement hands back (digits of another script)
    table = pa.table({"u": ["1", "2", "3"], "i": ["5", "6", "7"], "t": ["1700000000"] * 3})
    table = table.append_column("a", pa.array(["view", "٣٣", "shrug"]))
    with connect(extensions=()) as con, pytest.raises(ImportDataError, match=r"value '٣٣' \(event 1\)"):
        BatchMapper(EventMapper(mapping, config), con).map(with_positions(table))
    table = table.set_column(3, "a", pa.array(["view", "shrug", "٣٣"]))
    with connect(extensions=()) as con, pytest.raises(ImportDataError, match=r"value 'shrug' \(event 1\)"):
        BatchMapper(EventMapper(mapping, config), con).map(with_positions(table))


# -- whole files against the reference's rules ----------------------------------------------------------------

BASE_MAPPING = {
    "format": "csv",
    "user": "u",
    "item": "i",
    "time": "t",
    "time_unit": "s",
    "feature_group": "engagement",
    "action": "a",
    "action_flags": {"view": 1, "like": 2},
    "unknown_action": "skip",
    "columns": {"completion_ratio": {"source": "r", "scale": 0.1}},
}


def reference_import(rows: list[dict | str], mapper: EventMapper) -> tuple[list[tuple], ImportStats]:
    """The records of a file by the rules of `files`' docstring, row by row: (partition, LSN,
    arrival ms, payload) in arrival order, and the stats."""
    stats = ImportStats()
    events = mapper.events
    staged: list[tuple[int, int, int, str]] = []  # (arrival, partition, seq, payload)
    waiting: list[tuple[int, int, str]] = []
    last = None
    for seq, row in enumerate(rows):
        if isinstance(row, str):
            stats.unreadable += 1
            partition, arrival, payload = mapper.first_partition, None, unreadable_line_payload(row)
        else:
            stats.rows += 1
            mapped = mapper.event(row, seq)
            if mapped is None:
                stats.skipped += 1
                continue
            partition, event_ms, arrival_value, payload = mapped
            if usable_time(event_ms, events) is not None:
                stats.saw(event_ms)
            elif out_of_range(event_ms, events):
                stats.saw_out_of_range(event_ms)
            else:  # no time ingest reads: quarantined as missing_event_ts or wrong_type
                stats.no_time += 1
            arrival = usable_time(arrival_value, events)
            if arrival is None and mapper.mapping.arrival_time:
                arrival = usable_time(event_ms, events)
        stats.partitions.add(partition)
        arrival = arrival if arrival is not None else last
        if arrival is None:
            waiting.append((partition, seq, payload))
            continue
        last = arrival
        staged += [(arrival, p, s, text) for p, s, text in waiting] + [(arrival, partition, seq, payload)]
        waiting = []
    staged += [(events.min_event_ms, p, s, text) for p, s, text in waiting]
    lsns: dict[int, int] = {}
    records = []
    for arrival, partition, _, payload in sorted(staged):
        records.append((partition, lsns.get(partition, 0), arrival, payload))
        lsns[partition] = lsns.get(partition, 0) + 1
    stats.records = len(records)
    return records, stats


def imported(path: Path, mapping, config: Config, streaming=False, **options) -> tuple[list[tuple], ImportStats]:
    """The file's records (partition, LSN, arrival ms, payload) and stats; `streaming`: taken as
    they come, forgotten when the import starts again sorted (as `seqlake import` takes them)."""
    stats = ImportStats()
    batches: list[pa.RecordBatch] = []
    restart = batches.clear if streaming else None
    records = import_file(path, mapping, config, stats=stats, allow_out_of_range=True, restart=restart, **options)
    batches.extend(records)
    table = pa.Table.from_batches(batches, schema=RAW_SCHEMA)
    arrival = table.column("arrival_ts").cast(pa.int64()).to_pylist()
    rows = zip(table.column("source_partition").to_pylist(), table.column("lsn").to_pylist(), arrival, strict=True)
    payloads = table.column("payload").to_pylist()
    return [(p, lsn, a, text) for (p, lsn, a), text in zip(rows, payloads, strict=True)], stats


FIELDS = ("u", "i", "t", "a", "r")
FILE_TEXT = st.one_of(
    st.sampled_from([v for v in HOSTILE_TEXT if not any(c in v for c in '\r\n"\x00,:\x1c\x1d\x1e\x85\u2028\u2029')]),
    st.integers(1_500_000_000, 1_500_100_000).map(str),  # times near each other: arrival order matters
)


@st.composite
def file_rows(draw: st.DrawFn) -> list[dict | str]:
    """Rows of user, item, time, action, ratio; now and then a line with a field too many."""
    count = draw(st.integers(1, 40))
    rows: list[dict | str] = []
    for _ in range(count):
        if draw(st.integers(0, 9)) == 0:
            rows.append("9,9,9,9,9,9")
            continue
        rows.append(
            {
                "u": draw(st.one_of(st.integers(0, 20).map(str), FILE_TEXT)),
                "i": draw(st.one_of(st.integers(0, 10**6).map(str), FILE_TEXT)),
                "t": draw(FILE_TEXT),
                "a": draw(st.sampled_from(["view", "like", "shrug", ""])),
                "r": draw(FILE_TEXT),
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict | str]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FIELDS)
    for row in rows:
        if isinstance(row, str):
            out.write(row + "\n")
        else:
            writer.writerow([row[k] for k in FIELDS])
    path.write_text(out.getvalue(), encoding="utf-8")


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=file_rows(),
    partitions=st.sampled_from([1, 3]),
    batch_rows=st.sampled_from([3, 65536]),
    streaming=st.booleans(),
)
def test_a_csv_file_imports_to_the_references_records(
    config: Config, tmp_path_factory: pytest.TempPathFactory, rows, partitions: int, batch_rows: int, streaming
):
    path = tmp_path_factory.mktemp("csv") / "events.csv"
    write_csv(path, rows)
    mapping = parse_mapping({**BASE_MAPPING, "source_partitions": partitions})
    # what the reference reads: pyarrow's CSV values are the text written (an empty field is ""), and
    # the unreadable lines of a block (here the whole file) come after its rows
    read = [r for r in rows if not isinstance(r, str)] + [r for r in rows if isinstance(r, str)]
    expected = reference_import(read, EventMapper(mapping, config, first_partition=2))
    got = imported(path, mapping, config, streaming, first_partition=2, batch_rows=batch_rows)
    assert got[0] == expected[0]
    assert got[1] == expected[1]


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=file_rows(), newline=st.sampled_from(["\n", "\r\n", "\r"]), blank=st.booleans(), streaming=st.booleans())
def test_a_dat_file_imports_to_the_references_records(
    config: Config, tmp_path_factory: pytest.TempPathFactory, rows, newline: str, blank: bool, streaming: bool
):
    path = tmp_path_factory.mktemp("dat") / "events.dat"
    lines = [r.replace(",", "::") if isinstance(r, str) else "::".join(r[k] for k in FIELDS) for r in rows]
    text = newline.join(lines) + (newline * 2 if blank else "")
    path.write_bytes(text.encode())
    mapping = parse_mapping(
        {**BASE_MAPPING, "format": "dat", "delimiter": "::", "fields": list(FIELDS), "source_partitions": 3}
    )
    # what the reference reads: Python's text lines (universal newlines), blank ones skipped
    with open(path, encoding="utf-8", newline="") as handle:
        read = [line.rstrip("\r\n") for line in handle]
    source: list[dict | str] = []
    for line in read:
        if not line:
            continue
        parts = line.split("::")
        source.append(dict(zip(FIELDS, parts, strict=True)) if len(parts) == len(FIELDS) else line)
    expected = reference_import(source, EventMapper(mapping, config))
    got = imported(path, mapping, config, streaming, batch_rows=4)
    assert got[0] == expected[0]
    assert got[1] == expected[1]


@pytest.mark.parametrize(
    "rows",
    [
        [  # text times and ids, floats, nulls
            {"u": 1, "i": "0042", "t": "2024-05-01T10:00:00Z", "a": "view", "r": 7.5},
            {"u": 2, "i": " 43 ", "t": "1714557600", "a": "like", "r": -0.0},
            {"u": -4, "i": "x", "t": None, "a": "shrug", "r": None},
            {"u": 3, "i": "9" * 45, "t": "soon", "a": None, "r": 1e300},
            {"u": 5, "i": "١٢", "t": "2024-05-01T10:00:00.5+02:00", "a": "like", "r": 0.1},
        ],
        [  # numeric times, integer-valued floats as users, booleans, dates read as timestamps
            {"u": 2.0, "i": 43, "t": 1714557600, "a": "view", "r": True, "d": "2024-05-01"},
            {"u": 7.5, "i": 2**62, "t": -5, "a": "like", "r": False, "d": "2024-05-02"},
            {"u": 1e30, "i": -1, "t": 1714557600, "a": "view", "r": None, "d": None},
        ],
    ],
)
def test_json_lines_of_each_type_import_to_the_references_records(config: Config, tmp_path: Path, rows):
    import pyarrow.json as pj

    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    columns = {"completion_ratio": {"source": "r", "scale": 0.1}, "surface": "i", "is_autoplay": "r"}
    if "d" in rows[0]:
        columns["surface"] = "d"  # a timestamp as text: the reference writes it
    mapping = parse_mapping({**BASE_MAPPING, "format": "jsonl", "source_partitions": 2, "columns": columns})
    source = pj.read_json(path).to_pylist()  # the values as the reader types them
    expected = reference_import(source, EventMapper(mapping, config))
    assert imported(path, mapping, config) == imported(path, mapping, config, streaming=True) == expected


def test_records_stream_while_in_arrival_order_and_start_again_sorted_when_not(config: Config, tmp_path: Path):
    mapping = parse_mapping({**BASE_MAPPING, "columns": {}})
    # "soon" has no time: it waits for the first one; the last line goes back in time
    lines = ["u,i,t,a", "1,5,soon,view", "2,6,1700000000,view", "3,7,1700000100,like", "4,8,1699999999,view"]
    path = tmp_path / "events.csv"
    path.write_text("\n".join(lines) + "\n")
    restarts: list[int] = []
    received: list[pa.RecordBatch] = []

    def restart() -> None:
        restarts.append(len(received))
        received.clear()

    stats = ImportStats()
    received.extend(import_file(path, mapping, config, batch_rows=1, stats=stats, restart=restart))
    assert restarts == [0]  # the whole first batch of rows was mapped before the order broke: nothing sent
    assert (imported(path, mapping, config), stats.records) == (imported(path, mapping, config, streaming=True), 4)
    path.write_text("\n".join(lines[:-1]) + "\n")
    restarts.clear()
    received.clear()
    received.extend(import_file(path, mapping, config, batch_rows=1, restart=restart))
    assert restarts == [] and len(received) == 3  # in arrival order: streamed, never started again


def test_streaming_refuses_events_out_of_range_after_its_records(config: Config, tmp_path: Path):
    path = tmp_path / "events.csv"
    path.write_text("u,i,t,a\n1,5,1700000000,view\n2,6,900000000,view\n")
    mapping = parse_mapping({**BASE_MAPPING, "columns": {}})
    received: list[pa.RecordBatch] = []
    with pytest.raises(ImportDataError, match="1 events outside the configured event times"):
        received.extend(import_file(path, mapping, config, restart=received.clear))
    with pytest.raises(ImportDataError, match="1 events outside the configured event times"):
        list(import_file(path, mapping, config))  # staged: refused before any record
