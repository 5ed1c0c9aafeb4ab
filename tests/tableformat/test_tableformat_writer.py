"""The history file layout as any Parquet reader sees it."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.tableformat import thrift_compact as tc
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.footer import FileFacts
from seqlake.tableformat.layout import LayoutPolicy
from seqlake.tableformat.page_reader import PagedFile
from seqlake.tableformat.schema import history_arrow_schema
from seqlake.tableformat.writer import HistoryFileWriter, UnsortedInputError
from tests.conftest import make_config
from tests.history_data import synthetic_history

POLICY = LayoutPolicy(dedicated_user_rows=500, packed_row_group_rows=2000, max_row_group_rows=4000)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return make_config(tmp_path_factory.mktemp("wh"))


def one_bucket(config, lengths: dict[int, int]) -> pa.Table:
    # A single file holds one bucket; for layout tests, sort users of any bucket together.
    data = synthetic_history(config, lengths)
    return data.sort_by([(k, "ascending") for k in ("user_id", "feature_group", "event_ts", "lsn")])


def write(config, data: pa.Table, path, batch_rows: int = 700, policy: LayoutPolicy = POLICY):
    writer = HistoryFileWriter(
        str(path),
        history_arrow_schema(config),
        run_id="w7",
        bucket=0,
        group_order=list(config.feature_groups),
        policy=policy,
    )
    for batch in data.to_batches(max_chunksize=batch_rows):
        writer.write(batch)
    return writer.close()


def test_row_groups_follow_users(config, tmp_path):
    lengths = {10 + i: 50 + 13 * i for i in range(30)} | {100: 9_000, 101: 600}
    data = one_bucket(config, lengths)
    written = write(config, data, tmp_path / "f.parquet")
    meta = pq.read_metadata(tmp_path / "f.parquet")
    assert written.row_groups == meta.num_row_groups
    users_by_group = [
        set(pq.ParquetFile(tmp_path / "f.parquet").read_row_group(g, columns=["user_id"])["user_id"].to_pylist())
        for g in range(meta.num_row_groups)
    ]
    for user, n in lengths.items():
        groups = [g for g, users in enumerate(users_by_group) if user in users]
        if n >= POLICY.dedicated_user_rows:
            # Long histories own their row groups, one feature group each, cut at the maximum size.
            assert all(users_by_group[g] == {user} for g in groups)
            per_group = (
                data.filter(pc.equal(data["user_id"], user)).group_by("feature_group").aggregate([("lsn", "count")])
            )
            expected = sum(-(-count // POLICY.max_row_group_rows) for count in per_group["lsn_count"].to_pylist())
            assert len(groups) == expected
            file = pq.ParquetFile(tmp_path / "f.parquet")
            assert all(len(set(file.read_row_group(g, columns=["feature_group"])[0].to_pylist())) == 1 for g in groups)
        else:
            assert len(groups) == 1  # a short history is never split
    for g in range(meta.num_row_groups):
        assert meta.row_group(g).num_rows <= POLICY.max_row_group_rows


def test_footer_facts_describe_the_file(config, tmp_path):
    data = one_bucket(config, {5: 300, 6: 40, 9: 1200})
    written = write(config, data, tmp_path / "f.parquet")
    facts = FileFacts.from_metadata(pq.read_metadata(tmp_path / "f.parquet").metadata)
    assert facts is not None  # the writer's footer carries its facts
    assert facts == written.facts
    assert facts.row_count == data.num_rows and facts.run_id == "w7"
    assert facts.key_min[0] == 5 and facts.key_max[0] == 9
    assert facts.checksum == table_checksum(data, history_arrow_schema(config))
    assert set(facts.lsn_ranges) == {str(p) for p in set(data["source_partition"].to_pylist())}
    assert facts.windows == [min(data["window_id"].to_pylist()), max(data["window_id"].to_pylist())]


def test_checksum_does_not_depend_on_batching(config, tmp_path):
    data = one_bucket(config, {1: 800, 2: 30})
    a = write(config, data, tmp_path / "a.parquet", batch_rows=97)
    b = write(config, data, tmp_path / "b.parquet", batch_rows=5000)
    assert a.facts.checksum == b.facts.checksum
    changed = data.set_column(
        data.schema.get_field_index("watch_time_ms"),
        "watch_time_ms",
        pa.array([7] + data["watch_time_ms"].to_pylist()[1:], pa.int32()),
    )
    c = write(config, changed, tmp_path / "c.parquet")
    assert c.facts.checksum != a.facts.checksum


def test_encodings_statistics_bloom_filter_and_page_index(config, tmp_path):
    data = one_bucket(config, {1: 3000, 2: 100})
    # The fixed rule by type (files whose encodings are not chosen from their rows).
    write(config, data, tmp_path / "f.parquet", policy=dataclasses.replace(POLICY, choose_encodings=False))
    meta = pq.read_metadata(tmp_path / "f.parquet")
    names = meta.schema.to_arrow_schema().names
    column = meta.row_group(0).column
    assert "DELTA_BINARY_PACKED" in column(names.index("event_ts")).encodings
    assert "DELTA_BINARY_PACKED" in column(names.index("lsn")).encodings
    assert "RLE_DICTIONARY" in column(names.index("surface")).encodings
    assert column(names.index("user_id")).bloom_filter_offset is not None
    assert column(names.index("user_id")).has_column_index
    assert column(names.index("user_id")).statistics.has_min_max
    # Integers bit-packed and left uncompressed; floats plain under lz4 (every engine's default reader
    # decodes them); strings by dictionary.
    assert "DELTA_BINARY_PACKED" in column(names.index("item_id")).encodings
    assert column(names.index("item_id")).compression == "UNCOMPRESSED"
    assert "PLAIN" in column(names.index("completion_ratio")).encodings
    assert column(names.index("completion_ratio")).compression == "LZ4"  # LZ4_RAW: pyarrow names it so
    assert column(names.index("surface")).compression == "LZ4"
    chunk = PagedFile(meta).chunk(0, names.index("surface"))
    assert tc.get(tc.get(chunk, 3), 4) == 7  # Parquet's LZ4_RAW codec, not the deprecated Hadoop-framed LZ4
    assert meta.row_group(0).sorting_columns[0].column_index == names.index("user_id")


def test_each_column_gets_the_encoding_and_codec_its_footer_records(config, tmp_path):
    data = one_bucket(config, {1: 3000, 2: 100})
    written = write(config, data, tmp_path / "f.parquet")
    meta = pq.read_metadata(tmp_path / "f.parquet")
    facts = FileFacts.from_metadata(meta.metadata)
    assert facts is not None and facts.encodings == written.facts.encodings
    assert set(facts.encodings) == set(history_arrow_schema(config).names)
    assert facts.encodings["user_id"][0] == "RLE_DICTIONARY"  # the bloom-filtered key keeps its dictionary
    codecs = {"none": "UNCOMPRESSED", "lz4": "LZ4", "zstd": "ZSTD"}
    names = meta.schema.to_arrow_schema().names
    for g in range(meta.num_row_groups):
        for name, (encoding, codec) in facts.encodings.items():
            chunk = meta.row_group(g).column(names.index(name))
            assert chunk.compression == codecs[codec], name
            # A dictionary that outgrows its page limit falls back to plain pages.
            assert encoding in chunk.encodings or (encoding == "RLE_DICTIONARY" and "PLAIN" in chunk.encodings), name
    back = pq.read_table(tmp_path / "f.parquet").select(data.column_names)
    assert back.equals(data.cast(meta.schema.to_arrow_schema()))


def test_any_parquet_reader_reads_the_file_unchanged(config, tmp_path):
    data = one_bucket(config, {3: 200, 4: 20})
    write(config, data, tmp_path / "f.parquet")
    with lake_cursor() as con:
        rows = con.execute(
            "SELECT user_id, lsn, item_id, surface FROM read_parquet(?) ORDER BY user_id, feature_group, event_ts, lsn",
            [str(tmp_path / "f.parquet")],
        ).fetchall()
    expected = data.select(["user_id", "lsn", "item_id", "surface"]).to_pylist()
    assert [tuple(r.values()) for r in expected] == rows


def test_unsorted_or_repeated_keys_are_refused_and_leave_no_file(config, tmp_path):
    data = one_bucket(config, {1: 50, 2: 50})
    swapped = pa.concat_tables([data.slice(50), data.slice(0, 50)])
    path = tmp_path / "bad.parquet"
    with (
        pytest.raises(UnsortedInputError, match=r"does not follow"),
        HistoryFileWriter(
            str(path),
            history_arrow_schema(config),
            run_id="w1",
            bucket=0,
            group_order=list(config.feature_groups),
        ) as writer,
    ):
        writer.write(swapped)
    assert not path.exists()
    with pytest.raises(UnsortedInputError):
        write(config, pa.concat_tables([data.slice(0, 10), data.slice(9, 5)]), tmp_path / "dup.parquet")


def test_policy_validates_itself():
    with pytest.raises(ValueError, match="bloom_filter_fpp must be between 0 and 1"):
        LayoutPolicy(bloom_filter_fpp=1.5)


def test_equal_keys_from_two_source_partitions_are_ordered_by_partition(config, tmp_path):
    # LSNs count per source partition: two imports of one user's events can give equal keys.
    row = one_bucket(config, {1: 1})
    other = pa.Table.from_pylist([{**row.to_pylist()[0], "source_partition": 9}], schema=row.schema)
    written = write(config, pa.concat_tables([row, other]), tmp_path / "tie.parquet")
    assert written.facts.row_count == 2
    with pytest.raises(UnsortedInputError, match="source partition"):
        write(config, pa.concat_tables([other, row]), tmp_path / "tie_reversed.parquet")


def test_pages_hold_at_most_max_rows_per_page_rows(config, tmp_path):
    # A Top-K decodes whole pages: the default layout cuts them at 16,384 rows even where 64 KiB of
    # delta-packed integers would hold about twice that.
    data = one_bucket(config, {5: 60_000})
    write(config, data, tmp_path / "f.parquet", batch_rows=8192, policy=LayoutPolicy())
    meta = pq.read_metadata(tmp_path / "f.parquet")
    paged = PagedFile(meta)
    columns = [paged.column[name] for name in ("item_id", "event_ts", "surface")]
    for rg in range(meta.num_row_groups):
        rows = paged.num_rows(rg)
        for _, _, first in paged.locations(
            rg, columns, lambda ranges: [_read(tmp_path / "f.parquet", r) for r in ranges]
        ):
            sizes = [*(b - a for a, b in zip(first[:-1], first[1:], strict=True)), rows - first[-1]]
            assert max(sizes) <= 16_384


def _read(path, byte_range: tuple[int, int]) -> bytes:
    offset, length = byte_range
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(length)
