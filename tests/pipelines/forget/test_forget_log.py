"""Forget reaches the log: on a real lake, through the commands.

- An ingest racing a forget (killed between its read and its landing commit, the forget run in that
  gap, then run again) lands none of the forgotten users' records, pending or replayed; nor does a
  later compaction bring them back.
- After the forget and the documented maintain (every retention 0), no file under the warehouse holds
  a forgotten id: not as text in any file's bytes (Iceberg metadata JSON and Avro manifests, the Delta
  log, checkpoints, the catalog), not as a value of any Parquet column (every column of every file
  read, numbers compared, strings searched).
- `seqlake forget --check USER` proves the deletion from the keyed hash.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqlake.core.config import load_config
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.forget_key import FORGET_KEY_ENV
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.demo.full import RAW_TABLE
from seqlake.pipelines.faults import KILL_AT_ENV, STOP_AT_ENV
from seqlake.pipelines.forget.landing import landing_rows
from seqlake.pipelines.forget.remove import tables_with_users, user_rows
from seqlake.pipelines.ingest.raw_source import land_raw_records
from seqlake.pipelines.landing.tables import LandingTier, landing_paths
from tests.pipelines.compaction.test_no_event_lost import make_warehouse, seqlake

KEY = {FORGET_KEY_ENV: os.environ[FORGET_KEY_ENV]}


def run(config_path: Path, *args: str, expect: int = 0, env: dict[str, str] | None = None):
    return seqlake(config_path, *args, expect=expect, env_extra=KEY | (env or {}))


def raw_of(config, users: list[int]) -> pa.Table:
    """The raw source's records whose payload names one of the users (their own events)."""
    table = open_catalog(config).load_table(table_identifier(config, RAW_TABLE))
    rows = table.scan().to_arrow()
    pattern = "|".join(rf'"user_id":\s*{u}[,}}]' for u in users)
    return rows.filter(pc.match_substring_regex(rows["payload"], pattern))


def held_anywhere(config, users: list[int]) -> dict[str, int]:
    history, _ = history_tables(config)
    held = {t.name()[-1]: user_rows(t, users) for t in [history, *tables_with_users(config)]}
    held["landing"] = landing_rows(LandingTier(landing_paths(config)), users)
    return {name: rows for name, rows in held.items() if rows}


def again(config, records: pa.Table, shift: int = 0) -> None:
    """Append `records` to the raw source once more (a replay: the same LSNs; or, with `shift`, later)."""
    table = open_catalog(config).load_table(table_identifier(config, RAW_TABLE))
    moved = records.set_column(1, "lsn", pc.add(records["lsn"], shift)) if shift else records
    land_raw_records(table, moved.cast(RAW_SCHEMA).to_batches())


def pick_users(config, count: int) -> list[int]:
    """Users whose id no other value of the lake happens to spell (an item id, a timestamp's digits),
    so a byte found is theirs."""
    history, _ = history_tables(config)
    rows = history.scan().to_arrow()
    others: set[str] = set()
    for name in rows.column_names:
        if name != "user_id":
            for value in pc.unique(rows[name].combine_chunks().cast(pa.string())).to_pylist():
                if value is not None:
                    others.update(re.findall(r"[0-9]+", value))
    # The demo's report (a document of its own in the warehouse folder) names a sample user.
    report = config.warehouse_path() / "report.json"
    if report.exists():
        others.update(re.findall(r"[0-9]+", report.read_text()))
    users = sorted(set(rows["user_id"].to_pylist()))
    return [u for u in users if str(u) not in others][:count]


def test_an_ingest_racing_a_forget_and_its_rerun_land_none_of_the_users_records(tmp_path: Path) -> None:
    config_path = make_warehouse(tmp_path)
    run(config_path, "demo", "--small")
    config = load_config(str(config_path))
    doomed = pick_users(config, 2)
    assert held_anywhere(config, doomed).get("landing")
    pending = raw_of(config, doomed)
    # Pending records of theirs (a later delivery), and the race: ingest reads and validates them,
    # is killed before its landing commit; the forget runs in that gap; ingest runs again.
    again(config, pending, shift=10**9)
    run(config_path, "ingest", expect=-9, env={KILL_AT_ENV: "ingest_quarantined"})
    run(config_path, "forget", *[a for u in doomed for a in ("--user", str(u))])
    run(config_path, "ingest")
    assert held_anywhere(config, doomed) == {}
    # The deletes' commit info names no user (a staged merge on the records' keys).
    paths = landing_paths(config)
    for uri in (paths.events, paths.quarantine):
        for log in Path(uri.removeprefix("file://")).glob("_delta_log/*.json"):
            infos = [line for line in log.read_text().splitlines() if '"commitInfo"' in line]
            assert not any(_spelled(doomed).search(line.encode()) for line in infos), log
    # Replayed: the same records delivered once more, before and after the forget's frontier's LSNs.
    again(config, pending)
    run(config_path, "ingest")
    run(config_path, "compact")
    assert held_anywhere(config, doomed) == {}
    # Events after the forget are new data.
    again(config, pending.slice(0, 3), shift=2 * 10**9)
    run(config_path, "ingest")
    assert held_anywhere(config, doomed) == {"landing": 3}


def test_an_ingest_paused_in_its_gap_while_a_forget_runs_lands_none_of_the_users_records(tmp_path: Path) -> None:
    """The two commands at once: the ingest stopped (SIGSTOP) after it read and validated a batch
    holding their pending records, the forget run to its end meanwhile, the ingest resumed; then run
    again."""
    config_path = make_warehouse(tmp_path)
    run(config_path, "demo", "--small")
    config = load_config(str(config_path))
    doomed = pick_users(config, 2)
    again(config, raw_of(config, doomed), shift=10**9)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")} | KEY
    ingest = subprocess.Popen(
        [sys.executable, "-m", "seqlake.cli", "ingest", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env | {STOP_AT_ENV: "ingest_quarantined"},
    )
    try:
        _, status = os.waitpid(ingest.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the ingest ended before its landing commit"
        run(config_path, "forget", *[a for u in doomed for a in ("--user", str(u))])
    finally:
        os.kill(ingest.pid, signal.SIGCONT)
    _, err = ingest.communicate(timeout=600)
    assert "Traceback" not in err, err
    assert held_anywhere(config, doomed) == {}
    run(config_path, "ingest")
    run(config_path, "compact")
    assert held_anywhere(config, doomed) == {}


def _spelled(users: list[int]) -> re.Pattern[bytes]:
    return re.compile(rb"(?<![0-9])(" + b"|".join(str(u).encode() for u in users) + rb")(?![0-9])")


def _parquet_values(path: Path, users: list[int]) -> list[str]:
    """Where a Parquet file holds one of the users: a column's value equal to an id, or spelling it."""
    found = []
    wanted = pa.array(users, pa.int64())
    spelled = "|".join(rf"(^|[^0-9]){u}([^0-9]|$)" for u in users)
    table = pq.read_table(path)
    for name in table.column_names:
        column = table[name].combine_chunks()
        while pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = column.flatten()
        if pa.types.is_struct(column.type):
            fields = [column.field(i) for i in range(column.type.num_fields)]
        else:
            fields = [column]
        for values in fields:
            number = pa.types.is_integer(values.type) and pc.any(pc.is_in(values.cast(pa.int64()), wanted)).as_py()
            text = pa.types.is_string(values.type) and pc.any(pc.match_substring_regex(values, spelled)).as_py()
            if number or text:
                found.append(name)
    return found


def holding(warehouse: Path, users: list[int]) -> list[str]:
    """Every file under `warehouse` that holds one of the users: as text in its bytes, or in a Parquet column."""
    pattern = _spelled(users)
    found = []
    for path in sorted(p for p in warehouse.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if pattern.search(data):
            found.append(f"{path.relative_to(warehouse)}: the id as text")
        if data[:4] == b"PAR1":
            found += [f"{path.relative_to(warehouse)}: {column}" for column in _parquet_values(path, users)]
    return found


def test_after_forget_and_the_documented_maintain_no_file_holds_the_forgotten_ids(tmp_path: Path) -> None:
    config_path = make_warehouse(tmp_path)
    run(config_path, "demo", "--small")
    config = load_config(str(config_path))
    doomed = pick_users(config, 2)
    warehouse = config.warehouse_path()
    assert any("raw_events" in f for f in holding(warehouse, doomed))  # the search finds what is there

    run(config_path, "forget", *[a for u in doomed for a in ("--user", str(u))])
    maintain = ("maintain", "--snapshot-retention-hours", "0", "--orphan-safety-hours", "0")
    run(config_path, *maintain, "--landing-retention-hours", "0")
    found = holding(warehouse, doomed)
    assert found == [], "\n".join(found)

    # The keyed hash still proves it.
    check = run(config_path, "forget", "--check", str(doomed[0]), "--output", "json")
    proof = json.loads(check.stdout)
    assert proof["forgotten"] and proof["rows_left"] == 0 and proof["requests"]
    unknown = run(config_path, "forget", "--check", "7", expect=1)
    assert "no forget" in unknown.stderr
