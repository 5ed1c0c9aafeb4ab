"""No valid event is dropped unseen at import: events outside the configured event times are counted
and named and the file is refused unless told; a header line that reads as an event is refused; an
unreadable line is quarantined as `unreadable_line`, its text kept.

Every case runs the commands a user runs (`seqlake import`, `seqlake ingest`, `seqlake compact` on the
in-process engines) on a warehouse of its own.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import yaml

from seqlake.core.config import load_config
from seqlake.engines.catalog import open_catalog
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.tableformat.io import engine_location
from tests.pipelines.compaction.test_no_event_lost import make_warehouse, seqlake

# MovieLens-like ratings (userId,movieId,rating,timestamp in seconds): five from the 1990s, three after.
NINETIES = [
    (1, 31, 2.5, datetime(1996, 3, 29, 18, 36, tzinfo=UTC)),
    (1, 1029, 3.0, datetime(1997, 6, 1, 12, 0, tzinfo=UTC)),
    (2, 1061, 3.0, datetime(1998, 1, 2, 3, 4, tzinfo=UTC)),
    (3, 1129, 2.0, datetime(1999, 7, 7, 7, 7, tzinfo=UTC)),
    (3, 1172, 4.0, datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)),
]
LATER = [
    (1, 1263, 2.0, datetime(2000, 1, 1, tzinfo=UTC)),  # the floor itself is inside
    (2, 1287, 2.0, datetime(2009, 12, 14, 2, 52, tzinfo=UTC)),
    (4, 1293, 2.0, datetime(2018, 9, 24, 14, 27, tzinfo=UTC)),
]
MAPPING = {
    "format": "csv",
    "user": "userId",
    "item": "movieId",
    "time": "timestamp",
    "time_unit": "s",
    "feature_group": "engagement",
    "columns": {"completion_ratio": {"source": "rating", "scale": 0.2}},
}


def ratings_csv(path: Path, rows, header: bool = True) -> Path:
    lines = ["userId,movieId,rating,timestamp"] if header else []
    lines += [f"{user},{movie},{rating},{int(moment.timestamp())}" for user, movie, rating, moment in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_mapping(path: Path, **changes) -> Path:
    path.write_text(yaml.safe_dump({**MAPPING, **changes}, sort_keys=False))
    return path


def write_dat_mapping(path: Path, **changes) -> Path:
    """The same ratings as `::` lines of user, movie and time."""
    dat = {"format": "dat", "delimiter": "::", "fields": ["userId", "movieId", "timestamp"], "columns": {}}
    return write_mapping(path, **dat, **changes)


def warehouse(tmp_path: Path, min_event_time: str | None = None) -> Path:
    config = make_warehouse(tmp_path)
    if min_event_time is not None:
        data = yaml.safe_load(config.read_text())
        data["events"] = {**data["events"], "min_event_time": min_event_time}
        config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def raw_records(config_path: Path) -> int:
    config = load_config(str(config_path))
    catalog = open_catalog(config)
    identifier = f"{config.warehouse.namespace}.raw_events"
    if not catalog.table_exists(identifier):
        return 0
    return catalog.load_table(identifier).scan().to_arrow().num_rows


def quarantine(config_path: Path) -> list[tuple[str, str]]:
    """(reason, payload) of every quarantined record, in order."""
    paths = landing_paths(load_config(str(config_path)))
    with lake_cursor() as con:
        return con.execute(
            "SELECT reason, payload FROM delta_scan(?) ORDER BY source_partition, lsn",
            [engine_location(paths.quarantine)],
        ).fetchall()


def error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_events_before_the_floor_are_refused_counted_and_named_then_imported_when_allowed(tmp_path: Path) -> None:
    data = ratings_csv(tmp_path / "ratings.csv", NINETIES + LATER)
    mapping = write_mapping(tmp_path / "movielens.yaml")
    config = warehouse(tmp_path / "default")

    # Refused by default: one line with how many, their range and the two ways on; nothing imported.
    refused = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data), expect=1)
    line = error_line(refused)
    assert line.startswith("seqlake import: error: ") and str(data) in line
    assert "5 events outside the configured event times 2000-01-01 00:00:00 .. 2100-01-01 00:00:00 UTC" in line
    assert "from 1996-03-29 18:36:00 to 1999-12-31 23:59:59 UTC" in line
    assert "events.min_event_time" in line and "--allow-out-of-range" in line
    assert raw_records(config) == 0

    # With the flag: imported as it is, the summary naming them, and ingest quarantines exactly them.
    allowed = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data), "--allow-out-of-range")
    assert "5 events outside the configured event times, from 1996-03-29 18:36:00 to 1999-12-31 23:59:59" in (
        allowed.stdout
    )
    assert raw_records(config) == 8
    # The hint names the next command on this lake: the user's --config is repeated.
    assert f"next: seqlake ingest --config {config.resolve()} --source raw_events" in allowed.stdout
    seqlake(config, "ingest", "--engine", "duckdb")
    reasons = [reason for reason, _ in quarantine(config)]
    assert reasons == ["event_ts_out_of_range"] * 5
    # The JSON document says the same.
    again = seqlake(
        config, "import", "--mapping", str(mapping), "--input", str(data), "--allow-out-of-range", "--force",
        "--output", "json",
    )  # fmt: skip
    [file] = json.loads(again.stdout)["files"]
    assert (file["out_of_range"], file["first_out_of_range"], file["last_out_of_range"]) == (
        5,
        "1996-03-29T18:36:00Z",
        "1999-12-31T23:59:59Z",
    )
    assert (file["first_event"], file["last_event"]) == ("2000-01-01T00:00:00Z", "2018-09-24T14:27:00Z")

    # With the floor configured below them: imported without the flag, and every rating reaches history.
    lower = warehouse(tmp_path / "lower", min_event_time="1995-01-01T00:00:00Z")
    done = seqlake(lower, "import", "--mapping", str(mapping), "--input", str(data))
    assert "outside" not in done.stdout
    seqlake(lower, "ingest", "--engine", "duckdb")
    assert quarantine(lower) == []
    seqlake(lower, "compact", "--engine", "duckdb", "--end-of-stream")
    history, _ = history_tables(load_config(str(lower)))
    rows = history.scan(selected_fields=("user_id", "event_count")).to_arrow()
    assert pc.sum(rows["event_count"]).as_py() == 8
    assert sorted(set(rows["user_id"].to_pylist())) == [1, 2, 3, 4]


def test_a_header_line_that_reads_as_an_event_is_refused(tmp_path: Path) -> None:
    config = warehouse(tmp_path)
    headerless = ratings_csv(tmp_path / "headerless.csv", LATER, header=False)
    fields = ["userId", "movieId", "rating", "timestamp"]
    for header in (True, None):  # stated, or csv's default
        changes = {"fields": fields} | ({"header": header} if header is not None else {})
        mapping = write_mapping(tmp_path / f"header-{header}.yaml", **changes)
        refused = seqlake(config, "import", "--mapping", str(mapping), "--input", str(headerless), expect=1)
        line = error_line(refused)
        assert "takes the first line for a header" in line and "'1,1263,2.0,946684800' reads as an event" in line
        assert "header: false" in line
    assert raw_records(config) == 0
    # Said as it is, every line is an event.
    mapping = write_mapping(tmp_path / "no-header.yaml", fields=fields, header=False)
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(headerless), "--output", "json")
    assert json.loads(done.stdout)["files"][0]["events"] == len(LATER)
    # A real header line, renamed by `fields`, is still skipped.
    named = ratings_csv(tmp_path / "named.csv", LATER)
    mapping = write_mapping(tmp_path / "renamed.yaml", fields=["u", "m", "r", "t"], user="u", item="m", time="t")
    mapping.write_text(mapping.read_text().replace("source: rating", "source: r"))
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(named), "--output", "json")
    assert json.loads(done.stdout)["files"][0]["events"] == len(LATER)

    # The same for a `::` file.
    dat = tmp_path / "headerless.dat"
    dat.write_text("".join(f"{u}::{m}::{int(t.timestamp())}\n" for u, m, _, t in LATER))
    dat_mapping = write_dat_mapping(tmp_path / "dat.yaml", header=True)
    refused = seqlake(config, "import", "--mapping", str(dat_mapping), "--input", str(dat), expect=1)
    assert "'1::1263::946684800' reads as an event" in error_line(refused)


def test_unreadable_lines_are_quarantined_as_unreadable_line_with_their_text(tmp_path: Path) -> None:
    config = warehouse(tmp_path)
    data = ratings_csv(tmp_path / "ratings.csv", LATER)
    with data.open("a") as handle:
        handle.write("5,1301\n")  # a field short
        handle.write("6,1302,4.5,1537799250,extra\n")  # a field too many
    mapping = write_mapping(tmp_path / "movielens.yaml")
    dat = tmp_path / "ratings.dat"
    dat.write_text("7::1303::1537799250\n7::1304\n")
    dat_mapping = write_dat_mapping(tmp_path / "dat.yaml")
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data))
    assert "2 unreadable lines" in done.stdout
    done = seqlake(config, "import", "--mapping", str(dat_mapping), "--input", str(dat))
    assert "1 unreadable lines" in done.stdout
    seqlake(config, "ingest", "--engine", "duckdb")
    found = sorted((reason, json.loads(payload)["unreadable_line"]) for reason, payload in quarantine(config))
    assert found == [("unreadable_line", line) for line in ("5,1301", "6,1302,4.5,1537799250,extra", "7::1304")]


def landed(config_path: Path) -> int:
    """Events in the landing tier."""
    paths = landing_paths(load_config(str(config_path)))
    with lake_cursor() as con:
        counted = con.execute("SELECT count(*) FROM delta_scan(?)", [engine_location(paths.events)]).fetchone()
    assert counted is not None  # an aggregate answers one row
    return int(counted[0])


def test_every_line_of_a_csv_is_imported_or_counted_with_its_line_number(tmp_path: Path) -> None:
    # 20 ratings, and between them a line that is not UTF-8, one over max_line_bytes (longer than
    # what quarantine keeps of it), one with a field short and one whose time is not a time.
    ratings = [(user, 2000 + user, 3.5, datetime(2018, 9, 24, 14, user, tzinfo=UTC)) for user in range(20)]
    good = [f"{u},{m},{r},{int(t.timestamp())}".encode() for u, m, r, t in ratings]
    long_line = b"21,2021,4.0," + b"9" * 10_000
    lines = [b"userId,movieId,rating,timestamp", *good[:5], b"20,20\xff20,4.0,1537799250", *good[5:10]]
    lines += [long_line, *good[10:15], b"22,2022", *good[15:], b"23,2023,1.0,soon"]
    data = tmp_path / "ratings.csv"
    data.write_bytes(b"\n".join(lines) + b"\n")
    bad_utf8, too_long, short, no_time = 7, 13, 19, 25  # their line numbers (the header is line 1)
    mapping = write_mapping(tmp_path / "movielens.yaml", max_line_bytes=1000)

    # The summary names each bad line by its number and reason, and accounts for every line.
    config = warehouse(tmp_path / "text")
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data))
    assert "21 events read, 24 records (partitions 0..0), 3 unreadable lines, 1 without a usable time" in done.stdout
    assert (
        f"ratings.csv: unreadable: line {bad_utf8}: not UTF-8 text; line {too_long}: longer than max_line_bytes "
        f"(10,012 bytes, limit 1,000; its first 4,096 bytes kept); line {short}: 2 fields, expected 4"
    ) in done.stdout
    assert "24 rows in = 20 records to validate + 4 ingest quarantines" in done.stdout
    seqlake(config, "ingest", "--engine", "duckdb")
    # Every other line lands; the bad ones are quarantined, as much of their text kept as is safe.
    assert landed(config) == 20
    found = sorted(quarantine(config))
    assert [reason for reason, _ in found] == ["unreadable_line"] * 3 + ["wrong_type"]
    kept = sorted(json.loads(payload)["unreadable_line"] for _, payload in found[:3])
    assert kept == ["20,20\\xff20,4.0,1537799250", "21,2021,4.0," + "9" * (4096 - 12), "22,2022"]
    assert json.loads(found[3][1])["event_ts"] == "soon"

    # The JSON document says the same: rows in = records + skipped, and ingest's share of them.
    config = warehouse(tmp_path / "json")
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data), "--output", "json")
    [file] = json.loads(done.stdout)["files"]
    assert [line["line"] for line in file["unreadable_lines"]] == [bad_utf8, too_long, short]
    assert (file["rows_in"], file["events"], file["records"], file["skipped"]) == (24, 21, 24, 0)
    assert (file["unreadable"], file["no_time"], file["quarantined"]) == (3, 1, 4)
    assert no_time == len(lines)


def test_a_line_longer_than_the_first_block_is_read(tmp_path: Path) -> None:
    # Within max_line_bytes (its default, 8 MiB), a line longer than the reader's first block (1 MiB
    # at --batch-rows 1) is read whole: the block grows to it.
    config = warehouse(tmp_path)
    long_text = "x" * (3 << 20)
    data = tmp_path / "long.csv"
    data.write_text(
        f"userId,movieId,note,timestamp\n1,100,short,1537799250\n2,200,{long_text},1537799251\n3,300,,1537799252\n"
    )
    mapping = write_mapping(tmp_path / "notes.yaml", columns={})
    done = seqlake(
        config, "import", "--mapping", str(mapping), "--input", str(data), "--batch-rows", "1", "--output", "json"
    )
    [file] = json.loads(done.stdout)["files"]
    assert (file["events"], file["unreadable"]) == (3, 0)


def test_a_header_line_given_header_false_is_named_as_a_header(tmp_path: Path) -> None:
    config = warehouse(tmp_path)
    data = ratings_csv(tmp_path / "ratings.csv", LATER)  # its first line is a header line
    mapping = write_mapping(
        tmp_path / "no-header.yaml", fields=["userId", "movieId", "rating", "timestamp"], header=False
    )
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(data), "--output", "json")
    [file] = json.loads(done.stdout)["files"]
    assert (file["events"], file["unreadable"]) == (len(LATER), 1)
    [named] = file["unreadable_lines"]
    assert named["line"] == 1 and "a header line" in named["reason"] and "header: true" in named["reason"]
    seqlake(config, "ingest", "--engine", "duckdb")
    assert quarantine(config) == [("unreadable_line", '{"unreadable_line": "userId,movieId,rating,timestamp"}')]
    assert landed(config) == len(LATER)


def test_an_empty_file_exits_0_with_one_warning_line(tmp_path: Path) -> None:
    config = warehouse(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    mapping = write_mapping(tmp_path / "movielens.yaml")
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(empty))
    warnings = [line for line in done.stderr.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and f"{empty}: an empty file: nothing imported from it" in warnings[0], done.stderr
    assert "0 events read" in done.stdout
    # A header line alone says so too.
    header_only = tmp_path / "header.csv"
    header_only.write_text("userId,movieId,rating,timestamp\n")
    done = seqlake(config, "import", "--mapping", str(mapping), "--input", str(header_only), "--output", "json")
    warnings = [line for line in done.stderr.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and f"{header_only}: no events in it" in warnings[0], done.stderr
    assert json.loads(done.stdout)["files"][0]["rows_in"] == 0


def test_a_dat_line_that_is_not_utf8_is_named_and_the_rest_imports(tmp_path: Path) -> None:
    config = warehouse(tmp_path)
    dat = tmp_path / "ratings.dat"
    dat.write_bytes(b"7::1303::1537799250\n7::13\xe904::1537799251\n7::1305\n7::1306::1537799252\n")
    done = seqlake(config, "import", "--mapping", str(write_dat_mapping(tmp_path / "dat.yaml")), "--input", str(dat))
    assert "2 events read, 4 records (partitions 0..0), 2 unreadable lines" in done.stdout
    assert "ratings.dat: unreadable: line 2: not UTF-8 text; line 3: 2 fields, expected 3" in done.stdout
    seqlake(config, "ingest", "--engine", "duckdb")
    found = sorted(json.loads(payload)["unreadable_line"] for _, payload in quarantine(config))
    assert found == ["7::1305", "7::13\\xe904::1537799251"]
    assert landed(config) == 2
