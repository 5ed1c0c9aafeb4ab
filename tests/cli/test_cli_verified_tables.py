"""Every table seqlake writes reads verified, as a user meets it: a lake built by the commands on the
in-process engines (import, ingest, compact, capture, samples, backfill), then one byte flipped in a
data page of a detail, raw, training, samples, backfill and landing file in turn. Each flip is one a
plain Parquet read decodes into other rows (so without the check it would be an answer); through
`seqlake sql` it is one line naming the table, the file and `seqlake fsck`, exit 1, and `seqlake
fsck` names the file and what rewrites its table. A file replaced by another valid Parquet file is
refused the same way. With the bytes restored, both are clean again.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from seqlake import open as open_lake
from seqlake.core.config import load_config
from seqlake.core.errors import SqlError
from seqlake.pipelines.landing.live_files import delta_live_files
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.tables import load_existing_table
from tests.cli.test_cli_capture import START, USERS, project, seqlake

DIGEST = "SELECT count(*) AS n, md5(string_agg(t::VARCHAR, '|' ORDER BY t::VARCHAR)) AS digest FROM {} AS t"
TABLES = ("history_detail", "raw_events", "training_ranking", "samples_ranking", "backfill_ranking", "landing_events")


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    folder = project(tmp_path_factory.mktemp("verified_tables"))
    at = (START + timedelta(hours=7)).isoformat()
    (folder / "requests.csv").write_text("request_id,user_id,request_ts\n" + "".join(f"q{u},{u},{at}\n" for u in USERS))
    seqlake(folder, "capture", "--requests", "requests.csv", "--tenant", "ranking")
    seqlake(folder, "samples", "--tenant", "ranking")
    at = (START + timedelta(hours=3)).isoformat()
    (folder / "labels.csv").write_text("user_id,ts\n" + "".join(f"{u},{at}\n" for u in USERS))
    seqlake(folder, "backfill", "--labels", "labels.csv", "--tenant", "ranking")
    return folder


def largest_file(folder: Path, name: str) -> str:
    """The URI of the table's largest live file."""
    config = load_config(folder / "seqlake.yaml")
    if name == "landing_events":
        found = delta_live_files(landing_paths(config).events)
        assert found is not None
        return max(found[1], key=lambda f: f.size).uri
    table = load_existing_table(config, name)
    return max(table.scan().plan_files(), key=lambda t: t.file.file_size_in_bytes).file.file_path


def wrong_rows_flip(path: Path) -> int:
    """An offset in a page body whose flip a plain Parquet read (no CRC checked) decodes into other rows."""
    original = path.read_bytes()
    clean = pq.read_table(path)
    meta = pq.read_metadata(path)
    chunks = [meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)]
    for chunk in sorted(chunks, key=lambda c: -c.total_compressed_size):
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        end = start + chunk.total_compressed_size
        for offset in (end - 2, end - 5, end - 9):  # the last page's body, which its CRC covers
            damaged = bytearray(original)
            damaged[offset] ^= 0x5A
            path.write_bytes(bytes(damaged))
            try:
                if not pq.read_table(path).equals(clean):
                    return offset
            except Exception:  # noqa: BLE001 - a flip the decoder notices by itself: try another
                pass
            finally:
                path.write_bytes(original)
    raise AssertionError(f"no flip of {path} decodes into other rows")


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def refused_in_one_line(folder: Path, name: str, uri: str) -> None:
    done = seqlake(folder, "sql", "--quiet", "--query", DIGEST.format(name), expect=1)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"table {name}: file {uri}: " in lines[0] and "seqlake fsck --repair-plan" in lines[0], lines[0]
    assert done.stdout.strip() == ""  # no answer at all
    checked = seqlake(folder, "fsck", "--repair-plan", expect=1)
    broken = [line for line in checked.stderr.splitlines() if "BROKEN" in line]
    assert broken and all(uri in line for line in broken), checked.stderr
    assert f"repair plan: table {name}: 1 broken file(s)" in checked.stdout, checked.stdout
    assert f"  file {uri}" in checked.stdout


@pytest.mark.parametrize("name", TABLES)
def test_a_flipped_byte_in_any_table_is_one_line_from_sql_and_named_by_fsck(lake, name):
    before = seqlake(lake, "sql", "--quiet", "--output", "json", "--query", DIGEST.format(name)).stdout
    uri = largest_file(lake, name)
    path = local(uri)
    original = path.read_bytes()
    offset = wrong_rows_flip(path)
    damaged = bytearray(original)
    damaged[offset] ^= 0x5A
    try:
        path.write_bytes(bytes(damaged))
        refused_in_one_line(lake, name, uri)
        with open_lake(lake / "seqlake.yaml") as opened, pytest.raises(SqlError, match=f"table {name}: file "):
            opened.table(name)
    finally:
        path.write_bytes(original)
    assert seqlake(lake, "sql", "--quiet", "--output", "json", "--query", DIGEST.format(name)).stdout == before
    assert "OK" in seqlake(lake, "fsck").stdout


def test_a_replaced_samples_file_is_refused(lake):
    uri = largest_file(lake, "samples_ranking")
    path = local(uri)
    original = path.read_bytes()
    try:  # the same rows, another valid Parquet file of another size
        pq.write_table(pq.read_table(path), path, compression="none")
        assert path.stat().st_size != len(original)
        done = seqlake(lake, "sql", "--quiet", "--query", DIGEST.format("samples_ranking"), expect=1)
        assert len(done.stderr.strip().splitlines()) == 1 and "differs from the manifest's" in done.stderr
        assert f"file {uri}" in done.stderr
        checked = seqlake(lake, "fsck", expect=1)
        assert f"{uri}: [size]" in checked.stderr, checked.stderr
    finally:
        path.write_bytes(original)


def test_fsck_lists_every_table_it_checked(lake):
    import json

    document = json.loads(seqlake(lake, "fsck", "--output", "json").stdout)
    assert document["ok"] is True
    checked = {t["table"]: t for t in document["tables"]}
    assert set(TABLES) <= set(checked), checked
    assert all(checked[name]["files"] > 0 and checked[name]["rows"] > 0 for name in TABLES), checked
