"""Verified reads: a history file with flipped bytes, cut short or deleted never yields wrong rows.

One history file of a real run (written by seqlake's run writer, with page checksums) is damaged in
place: a byte flipped at many offsets across its dictionary pages, data pages and footer, the file
truncated at several lengths, the file deleted. After each, every user of the file is read the way a
point lookup reads (row groups planned from the footer's statistics, then only those row groups), through
`seqlake.tableformat.verified`: each read returns exactly the user's rows or raises one CorruptFileError naming
the table, the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from seqlake.tableformat.io import open_parquet, read_footer, resolve_uri, unverified_reads
from seqlake.tableformat.reader import Selection
from seqlake.tableformat.verified import (
    DAMAGE,
    CorruptFileError,
    open_verified,
    read_verified,
    verified_file,
    verified_footer,
)
from tests.conftest import make_config
from tests.history_data import SMALL_ROW_GROUPS, history_table, publish_run, synthetic_history

USERS = {1_000_000 + i: 5 + (i * 53) % 700 for i in range(70)}  # 70 users, 5 to 700 rows each


@pytest.fixture(scope="module")
def history_file(tmp_path_factory) -> tuple[str, Path]:
    config = make_config(tmp_path_factory.mktemp("verified") / "warehouse")
    config = config.model_copy(update={"layout": config.layout.model_copy(update={"bucket_count": 1})})
    table = history_table(config)
    files = publish_run(table, config, synthetic_history(config, USERS, seed=3), "w1", policy=SMALL_ROW_GROUPS)
    assert len(files) == 1
    uri = files[0].uri
    return uri, Path(resolve_uri(uri)[1])


def plan_row_groups(meta: pq.FileMetaData, user: int) -> list[int]:
    """Row groups whose user_id statistics may hold `user` (what a point lookup reads)."""
    column = meta.schema.to_arrow_schema().get_field_index("user_id")
    groups = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max or stats.min <= user <= stats.max:
            groups.append(g)
    return groups


def read_user(uri: str, user: int, verify: bool = True) -> pa.Table:
    """One user's rows as a point lookup reads them: footer, planned row groups, then a filter.

    `verify=False` reads the same way without checking the footer or the pages: the control.
    """
    fs, path = resolve_uri(uri)
    with verified_file(fs, path, uri) as handle:
        meta = verified_footer(handle, uri) if verify else read_footer(handle)
        groups = plan_row_groups(meta, user)
        parquet = open_verified(handle, metadata=meta) if verify else pq.ParquetFile(handle, metadata=meta)
        rows = parquet.read_row_groups(groups) if groups else parquet.schema_arrow.empty_table()
    return rows.filter(pc.equal(rows["user_id"], user))


def damage_offsets(path: Path) -> dict[str, list[int]]:
    """Offsets to flip, by part: dictionary pages, data pages (headers and bodies), the footer."""
    meta = pq.read_metadata(path)
    size = path.stat().st_size
    dictionary, data = [], []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.dictionary_page_offset is not None:
                dictionary += [chunk.dictionary_page_offset + k for k in (3, 12, 30)]
            start, length = chunk.data_page_offset, chunk.total_compressed_size
            data += [start + 5, start + 24, start + length // 2, start + length - 2]
    footer_length = int.from_bytes(path.read_bytes()[-8:-4], "little")
    footer_start = size - 8 - footer_length
    # The footer's start holds the schema and the first row groups' statistics: flipped densely there.
    footer = list(range(footer_start, footer_start + 800, 9))
    footer += list(range(footer_start + 800, size, max(1, footer_length // 60)))
    spread = list(range(4, size, max(1, size // 40)))
    return {"dictionary": dictionary[::9], "data": data[::25], "footer": footer, "spread": spread}


def test_pages_are_written_with_checksums(history_file):
    _, path = history_file
    # pyarrow verifies a page only if it carries a CRC: flip one data byte, and the verified read refuses.
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index("item_id"))
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[chunk.data_page_offset + chunk.total_compressed_size - 2] ^= 0x01
    try:
        path.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError, match="corrupt page \\(checksum mismatch\\)"):
            read_verified(str(path))
    finally:
        path.write_bytes(original)


def test_the_benchmark_control_reads_without_verification(history_file):
    # `unverified_reads` (the read benchmark's control) really skips the page checks: the same flip
    # that the readers' `open_parquet` refuses decodes without an error inside it.
    _, path = history_file
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index("item_id"))
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[chunk.data_page_offset + chunk.total_compressed_size - 2] ^= 0x01
    try:
        path.write_bytes(bytes(damaged))
        with pytest.raises(OSError, match="CRC checksum"):
            open_parquet(str(path)).read_row_group(0)
        with unverified_reads():
            try:
                open_parquet(str(path)).read_row_group(0)
            except DAMAGE as error:  # the flip may still fail to decompress, but no CRC was checked
                assert "CRC" not in str(error)
        with pytest.raises(OSError, match="CRC checksum"):
            open_parquet(str(path)).read_row_group(0)  # on again after the block
    finally:
        path.write_bytes(original)


def test_a_footer_whose_column_type_is_damaged_is_refused_not_a_crash(history_file, tmp_path):
    # pyarrow aborts the whole process when it builds the statistics of a column chunk whose physical
    # type was damaged; the footer check compares the types first and refuses the file.
    from seqlake.tableformat import thrift_compact as tc

    _, path = history_file
    raw = path.read_bytes()
    length = int.from_bytes(raw[-8:-4], "little")
    footer, _ = tc.decode(raw[-8 - length : -8])
    names = [tc.get(e, 4).decode() for e in tc.get(footer, 2)[1][1:]]
    kind, groups = tc.get(footer, 4)
    chunks = tc.get(groups[-1], 1)[1]
    column = names.index("event_ts")
    meta = tc.get(chunks[column], 3)
    chunks[column] = tc.replaced(chunks[column], {3: (tc.STRUCT, tc.replaced(meta, {1: (tc.I32, 9)}))})
    damaged_groups = groups[:-1] + [tc.replaced(groups[-1], {1: (tc.LIST, (tc.STRUCT, chunks))})]
    encoded = tc.encode(tc.replaced(footer, {4: (tc.LIST, (kind, damaged_groups))}))
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(raw[: -8 - length] + encoded + len(encoded).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(CorruptFileError, match="corrupt metadata: .*column event_ts"):
        read_verified(str(damaged))


def test_flipped_bytes_never_yield_wrong_rows(history_file):
    uri, path = history_file
    original = path.read_bytes()
    expected = {user: read_user(uri, user) for user in USERS}
    assert {u: t.num_rows for u, t in expected.items()} == USERS
    refused, wrong_unverified, checked = set(), 0, 0
    try:
        for part, offsets in damage_offsets(path).items():
            for offset in offsets:
                damaged = bytearray(original)
                damaged[offset] ^= 0x5A
                path.write_bytes(bytes(damaged))
                for user, rows in list(expected.items())[::5]:
                    checked += 1
                    with contextlib.suppress(CorruptFileError, *DAMAGE):
                        wrong_unverified += not read_user(uri, user, verify=False).equals(rows)
                    try:
                        got = read_user(uri, user)
                    except CorruptFileError as error:
                        assert error.table == "history" and error.uri == uri
                        assert str(error).startswith(f"table history: file {uri}: ")
                        refused.add((part, offset))
                        continue
                    assert got.equals(rows), f"{part} byte {offset}: wrong rows for user {user}"
    finally:
        path.write_bytes(original)
    assert checked > 2_000
    assert {part for part, _ in refused} == {"dictionary", "data", "footer", "spread"}
    # Without page checksums the same damage turns into wrong rows: the verification is what refuses it.
    assert wrong_unverified > 0


@pytest.mark.parametrize("keep", [0, 3, 4, 100, 0.5, -9, -8, -1])
def test_a_truncated_file_is_refused(history_file, keep):
    uri, path = history_file
    original = path.read_bytes()
    length = int(len(original) * keep) if isinstance(keep, float) else keep % len(original)
    try:
        path.write_bytes(original[:length])
        for user in list(USERS)[::7]:
            with pytest.raises(CorruptFileError, match="truncated or not a Parquet file"):
                read_user(uri, user)
        with pytest.raises(CorruptFileError, match="truncated or not a Parquet file"):
            read_verified(uri)
    finally:
        path.write_bytes(original)


def test_a_deleted_file_is_refused(history_file, tmp_path):
    uri, path = history_file
    shutil.move(path, tmp_path / "kept.parquet")
    try:
        with pytest.raises(CorruptFileError, match=f"table history: file {uri}: missing"):
            read_user(uri, next(iter(USERS)))
        with pytest.raises(CorruptFileError, match="missing"):
            read_verified(uri)
    finally:
        shutil.move(tmp_path / "kept.parquet", path)
    assert read_user(uri, next(iter(USERS))).num_rows == next(iter(USERS.values()))


def test_cost_of_verification(history_file, measurement):
    """Point reads of every user of the file, verified and not, interleaved: the ratio, not a limit."""
    uri, _ = history_file

    def read_all(verify: bool) -> float:
        started = time.perf_counter()
        for user in USERS:
            read_user(uri, user, verify=verify)
        return time.perf_counter() - started

    for verify in (True, False):  # warm the page cache for both
        read_all(verify)
    verified, plain = [], []
    for _ in range(5):
        verified.append(read_all(True))
        plain.append(read_all(False))
    ratio = statistics.median(verified) / statistics.median(plain)
    measurement(
        f"verified reads (page checksums + footer layout digest), {len(USERS)} point reads of one file: "
        f"{ratio:.2f}x the time of unverified reads (median of 5 interleaved repeats)"
    )
    assert all(read_user(uri, u).num_rows == n for u, n in USERS.items())


def test_the_history_reader_refuses_damaged_pages_and_footers(tmp_path):
    # The lookup path itself (index, page reader, row groups), not only seqlake.tableformat.verified.
    from seqlake.tableformat.reader import HistoryReader

    config = make_config(tmp_path / "warehouse")
    config = config.model_copy(update={"layout": config.layout.model_copy(update={"bucket_count": 1})})
    table = history_table(config)
    [written] = publish_run(table, config, synthetic_history(config, USERS, seed=5), "w1", policy=SMALL_ROW_GROUPS)
    path = Path(resolve_uri(written.uri)[1])
    original = path.read_bytes()
    users = list(USERS)[::7]
    expected = {user: HistoryReader(table).read_user(user, selection=Selection()) for user in users}
    offsets = damage_offsets(path)
    refused = 0
    try:
        for offset in offsets["data"] + offsets["footer"][::4]:
            damaged = bytearray(original)
            damaged[offset] ^= 0x5A
            path.write_bytes(bytes(damaged))
            reader = HistoryReader(table)  # nothing cached from before the damage
            for user, rows in expected.items():
                for selection in (Selection(), Selection(top_k=3)):
                    try:
                        got = reader.read_user(user, selection=selection)
                    except CorruptFileError as error:
                        assert error.uri == written.uri
                        refused += 1
                        continue
                    want = rows if selection.top_k is None else rows.slice(max(0, rows.num_rows - 3))
                    assert got.equals(want), f"byte {offset}: wrong rows for user {user}"
    finally:
        path.write_bytes(original)
    assert refused > 0
