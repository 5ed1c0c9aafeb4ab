"""fsck passes on a healthy history table and names the broken file and invariant otherwise."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic import publish_synthetic_run
from seqlake.tableformat.encoding_choice import Choice
from seqlake.tableformat.footer import FileFacts
from seqlake.tableformat.fsck import FsckError, fsck_table
from seqlake.tableformat.layout import DEFAULT_POLICY, parquet_writer_options
from seqlake.tableformat.registry import data_file_for, files_of_runs, run_id_of_path
from seqlake.tableformat.writer import WrittenFile
from tests.conftest import make_config
from tests.history_data import history_table, publish_run, synthetic_history

LENGTHS = {1_000_000 + i: 30 + 17 * i for i in range(40)} | {1_000_007: 3000}


@pytest.fixture
def table(tmp_path):
    config = make_config(tmp_path / "wh")
    table = history_table(config)
    publish_run(table, config, synthetic_history(config, LENGTHS, seed=3), "w1")
    publish_run(table, config, synthetic_history(config, {u: 20 for u in LENGTHS}, seed=4), "w2")
    table.config = config  # handy for the corruption helpers
    return table


def a_file(table) -> str:
    return sorted(task.file.file_path for task in table.scan().plan_files())[0]


def rewrite(uri: str, transform=lambda t: t, bloom: bool = True, facts=None) -> None:
    """Rewrite a file in place with the same layout options, after `transform` of its rows."""
    path = uri.removeprefix("file://")
    original = pq.ParquetFile(path)
    rows = transform(original.read())
    recorded = FileFacts.from_metadata(original.metadata.metadata)
    choices = {name: Choice(*choice) for name, choice in recorded.encodings.items()} if recorded else None
    options = parquet_writer_options(rows.schema, DEFAULT_POLICY, 1024, choices)
    if not bloom:
        del options["bloom_filter_options"]
    with pq.ParquetWriter(path, original.schema_arrow, **options) as writer:
        writer.write_table(rows)
        writer.add_key_value_metadata(facts or {k.decode(): v.decode() for k, v in original.metadata.metadata.items()})


def written_file(uri: str) -> WrittenFile:
    path = uri.removeprefix("file://")
    facts = FileFacts.from_metadata(pq.read_metadata(path).metadata)
    assert facts is not None, f"{uri} has no facts in its footer"
    return WrittenFile(uri, facts, os.path.getsize(path), 1)


def reregister(table, uri: str) -> None:
    """Point the manifest at the rewritten file again (new size and metrics)."""
    old = next(f for f in files_of_runs(table, {run_id_of_path(uri)}) if f.file_path == uri)
    with table.transaction() as tx, tx.update_snapshot().overwrite() as files:
        files.delete_data_file(old)
        files.append_data_file(data_file_for(table, written_file(uri)))
    table.refresh()


def test_healthy_table_passes(table):
    report = fsck_table(table)
    assert report.runs == 2
    assert report.rows == sum(LENGTHS.values()) + 20 * len(LENGTHS)
    assert report.files == 2 * table.config.layout.bucket_count


def test_unsorted_rows_are_found(table):
    uri = a_file(table)
    rewrite(uri, lambda t: pa.concat_tables([t.slice(1, 1), t.slice(0, 1), t.slice(2)]))
    reregister(table, uri)
    with pytest.raises(FsckError, match=r"rows are not sorted .* does not follow") as error:
        fsck_table(table)
    assert uri in str(error.value)


def test_missing_bloom_filter_is_found(table):
    uri = a_file(table)
    rewrite(uri, bloom=False)
    reregister(table, uri)
    with pytest.raises(FsckError, match="has no bloom filter on user_id") as error:
        fsck_table(table)
    assert uri in str(error.value)


def test_wrong_checksum_is_found(table):
    uri = a_file(table)

    def bump(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index("event_count")
        return t.set_column(i, t.field(i), pa.compute.add(t["event_count"], 1).cast(pa.int32()))

    rewrite(uri, bump)
    reregister(table, uri)
    with pytest.raises(FsckError, match="content checksum .* differs from footer") as error:
        fsck_table(table)
    assert uri in str(error.value)


def test_overlapping_ranges_in_one_run_are_found(table):
    # A second file for an already covered bucket of run w1, holding users that file holds too.
    uri = next(t.file.file_path for t in table.scan().plan_files() if "/rw1-" in t.file.file_path)
    copy = uri.replace(".parquet", "-copy.parquet")
    shutil.copy(uri.removeprefix("file://"), copy.removeprefix("file://"))
    with table.transaction() as tx, tx.update_snapshot().fast_append() as files:
        files.append_data_file(data_file_for(table, written_file(copy)))
    table.refresh()
    with pytest.raises(FsckError, match="user range overlaps"):
        fsck_table(table)


def test_file_outside_any_recorded_run_is_found(table):
    config = table.config
    data = synthetic_history(config, {2_000_000: 10})
    publish_synthetic_run(table, config, data, "w9", [0, 0], batch_rows=None)
    # Forget the run in the property while its file stays live: fsck must notice.
    runs = json.loads(table.metadata.properties["seqlake.runs"])
    del runs["w9"]
    with table.transaction() as tx:
        tx.set_properties({"seqlake.runs": json.dumps(runs)})
    table.refresh()
    with pytest.raises(FsckError, match="run w9, which is not a recorded live run"):
        fsck_table(table)


def test_encodings_other_than_the_footer_records_are_found(table):
    uri = a_file(table)
    path = uri.removeprefix("file://")
    recorded = FileFacts.from_metadata(pq.read_metadata(path).metadata)
    assert recorded is not None and recorded.encodings
    # The rewrite keeps the file's encodings; its footer then claims another codec for item_id.
    encoding, codec = recorded.encodings["item_id"]
    claimed = [encoding, "none" if codec == "zstd" else "zstd"]
    facts = dataclasses.replace(recorded, encodings=recorded.encodings | {"item_id": claimed})
    rewrite(uri, facts=facts.to_metadata())
    reregister(table, uri)
    with pytest.raises(FsckError, match=r"\[encodings\] row group 0 column item_id is .*, the footer records") as error:
        fsck_table(table)
    assert uri in str(error.value)


def test_files_without_recorded_encodings_still_pass(table):
    uri = a_file(table)
    path = uri.removeprefix("file://")
    old = {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items() if k != b"seqlake.encodings"}
    rewrite(uri, facts=old)
    reregister(table, uri)
    facts = FileFacts.from_metadata(pq.read_metadata(path).metadata)
    assert facts is not None and facts.encodings == {}
    assert fsck_table(table).rows == sum(LENGTHS.values()) + 20 * len(LENGTHS)
