"""An event imported twice counts once, whichever event id scheme its table's imports use.

An event without an id column gets the hash of its content as its id (`pipelines/importers/ids.py`).
Imports made before schemes were recorded used BLAKE2b (scheme 1); a new raw table gets DuckDB's MD5
(scheme 2). Each import commit records its scheme, and a table keeps the scheme of its first import:
a file that overlaps an earlier one, imported into the same table, gives the events they share the
ids they had, so compaction counts them once. Every case runs the commands a user runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import load_config
from seqlake.core.events import RAW_SCHEMA
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.importers import import_file, load_mapping
from seqlake.pipelines.importers.ids import SCHEME_PROPERTY
from seqlake.pipelines.ingest.raw_source import create_raw_table
from tests.pipelines.compaction.test_no_event_lost import make_warehouse, seqlake

# MovieTweetings ratings (user::imdb id::rating::unix seconds), the shipped mapping's format
FIRST = ["1::0114508::8::1381006850", "2::0104257::8::1364690142", "3::1074638::7::1365029107"]
MORE = ["4::1853728::8::1366576639", "5::0113277::6::1381006900"]
# The id the importer gave the first rating before schemes were recorded (BLAKE2b of its content)
FIRST_ID_BEFORE_SCHEMES = "b4458728e13a074c535bf011cef79bb0"


def ratings(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def raw_ids(config_path: Path) -> list[list[str]]:
    """The event ids the raw table holds after each of its commits, oldest first."""
    config = load_config(str(config_path))
    raw = open_catalog(config).load_table(table_identifier(config, "raw_events"))
    held = []
    for snapshot in sorted(raw.snapshots(), key=lambda s: s.sequence_number or 0):
        payloads = raw.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("payload").to_pylist()
        held.append([json.loads(payload)["event_id"] for payload in payloads])
    return held


def schemes(config_path: Path) -> list[str | None]:
    config = load_config(str(config_path))
    raw = open_catalog(config).load_table(table_identifier(config, "raw_events"))
    ordered = sorted(raw.snapshots(), key=lambda s: s.sequence_number or 0)
    return [s.summary.additional_properties.get(SCHEME_PROPERTY) if s.summary else None for s in ordered]


def counted_events(config_path: Path) -> int:
    """Events the published history counts, after ingest and compaction of every window."""
    seqlake(config_path, "ingest", "--engine", "duckdb")
    seqlake(config_path, "compact", "--engine", "duckdb", "--end-of-stream")
    history, _ = history_tables(load_config(str(config_path)))
    return pc.sum(history.scan(selected_fields=("event_count",)).to_arrow()["event_count"]).as_py()


def imported(config_path: Path, data: Path) -> dict:
    done = seqlake(config_path, "import", "--mapping", "movietweetings", "--input", str(data), "--output", "json")
    return json.loads(done.stdout)


def test_a_table_imported_into_before_schemes_keeps_their_ids(tmp_path: Path) -> None:
    config_path = make_warehouse(tmp_path)
    config = load_config(str(config_path))
    first = ratings(tmp_path / "first.dat", FIRST)
    # An import as the importer wrote it before schemes: BLAKE2b ids, a commit naming no scheme.
    raw = create_raw_table(open_catalog(config), table_identifier(config, "raw_events"))
    records = pa.Table.from_batches(list(import_file(first, load_mapping("movietweetings"), config, id_scheme=1)))
    raw.append(records.cast(RAW_SCHEMA), snapshot_properties={"seqlake.import.digest": "an earlier import"})
    assert FIRST_ID_BEFORE_SCHEMES in raw_ids(config_path)[0]

    # A file that holds the same ratings and two more: the table's scheme, the same ids.
    document = imported(config_path, ratings(tmp_path / "more.dat", FIRST + MORE))
    assert document["id_scheme"] == 1 and document["records"] == 5
    before, after = raw_ids(config_path)
    assert len(after) == 8 and len(set(after)) == 5 and set(before) < set(after)
    assert schemes(config_path) == [None, "1"]
    assert counted_events(config_path) == 5  # not 8: the three ratings imported twice count once


def test_a_new_table_takes_md5_ids_and_keeps_them(tmp_path: Path) -> None:
    config_path = make_warehouse(tmp_path)
    first = imported(config_path, ratings(tmp_path / "first.dat", FIRST))
    again = imported(config_path, ratings(tmp_path / "more.dat", FIRST + MORE))
    assert first["id_scheme"] == again["id_scheme"] == 2
    before, after = raw_ids(config_path)
    assert len(after) == 8 and len(set(after)) == 5 and FIRST_ID_BEFORE_SCHEMES not in before
    assert schemes(config_path) == ["2", "2"]
    assert counted_events(config_path) == 5
