"""The Python front door: `seqlake.open()` and its Lake, on a small warehouse, and the README's examples."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

import seqlake
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Capture, Request, capture_requests
from seqlake.pipelines.training.sequence import Tenant
from seqlake.tableformat.multi_reader import histories
from seqlake.tableformat.reader import HistoryReader, Selection
from tests.facade.test_sql import USER_ROWS, build_small_warehouse
from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_small_warehouse(tmp_path_factory.mktemp("lake") / "warehouse")


@pytest.fixture
def config_file(small, tmp_path) -> Path:
    path = tmp_path / "seqlake.yaml"
    path.write_text(yaml.safe_dump(small.config.model_dump(mode="json"), sort_keys=False))
    return path


@pytest.fixture
def lake(small):
    with seqlake.open(small.config) as lake:
        yield lake


def test_import_seqlake_loads_no_engine_until_a_name_is_used() -> None:
    # A fresh interpreter: this one has loaded everything already.
    probe = (
        "import sys, seqlake; heavy = ('pyspark', 'pyiceberg', 'duckdb', 'pyarrow', 'pydantic', 'deltalake'); "
        "before = sorted(m for m in heavy if m in sys.modules); seqlake.Selection; "
        "print(before, 'pyarrow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True"]  # nothing heavy, until Selection loaded the reader


def test_public_names_resolve_and_unknown_ones_fail() -> None:
    for name in seqlake.__all__:
        assert getattr(seqlake, name) is not None
    assert seqlake.Selection is Selection and seqlake.Tenant is Tenant and seqlake.Request is Request
    assert set(seqlake.__all__) == {*seqlake._EXPORTS, "__version__"}
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        seqlake.nope  # noqa: B018


def test_history_is_the_readers_with_options_over_a_selection(lake, small):
    history, _ = history_tables(small.config)
    reader = HistoryReader(history)
    user = 44
    chosen = Selection(feature_groups=("engagement",), columns=("item_id", "event_ts"), top_k=7, newest_first=True)
    expected = reader.read_user(user, selection=chosen)
    assert expected.num_rows == 7
    assert lake.history(user, chosen).equals(expected)
    options = lake.history(
        user, feature_groups=["engagement"], columns=["item_id", "event_ts"], top_k=7, newest_first=True
    )
    assert options.equals(expected)
    # Options override the selection's fields.
    assert lake.history(user, chosen, top_k=3).equals(
        reader.read_user(user, selection=Selection(**{**vars(chosen), "top_k": 3}))
    )
    assert lake.history(user).num_rows == USER_ROWS[user]
    with pytest.raises(TypeError):
        lake.history(user, None, ["engagement"])  # options are keyword-only


def test_histories_and_fresh_reads(lake, small):
    history, _ = history_tables(small.config)
    users = [33, 11, 99]
    got = lake.histories(users, top_k=5)
    assert list(got) == users
    expected = histories(HistoryReader(history), users, Selection(top_k=5))
    assert all(got[u].equals(expected[u]) for u in users) and got[99].num_rows == 0
    # User 22 has an event in window W0+3, landed but not published: a fresh read adds it.
    assert lake.history(22, fresh=True).num_rows == lake.history(22).num_rows + 1
    assert lake.history(11, fresh=True).equals(lake.history(11))


def test_history_as_of_a_frontier_a_snapshot_or_an_arrival_time(tmp_path):
    from datetime import timedelta

    from tests.conftest import make_config
    from tests.history_data import HOUR_US, TRAVEL_WINDOW, time_travel_history

    config = make_config(tmp_path / "warehouse")
    user = 1_000_003
    _, (first, second, _), rows = time_travel_history(config, user)
    end_of_first = datetime.fromtimestamp((TRAVEL_WINDOW + 1) * HOUR_US / 1e6, UTC)

    def keys(table: pa.Table) -> list[tuple[int, int]]:
        return list(zip(table["source_partition"].to_pylist(), table["lsn"].to_pylist(), strict=True))

    def under(bounds: dict[int, int]) -> list[tuple[int, int]]:
        return [(p, lsn) for p, lsn in keys(rows) if lsn <= bounds.get(p, -1)]

    with seqlake.open(config) as lake:
        columns = ["source_partition", "lsn"]
        assert keys(lake.history(user, columns=columns, as_of=first)) == under({0: 109, 1: 19})
        assert keys(lake.history(user, columns=columns, as_of=second)) == under({0: 119, 1: 29}) == keys(rows)
        later = end_of_first + timedelta(minutes=30)
        assert keys(lake.history(user, columns=columns, as_of=later)) == under({0: 109, 1: 19})
        exact = seqlake.Frontier({0: 104, 1: 24})
        assert keys(lake.history(user, columns=columns, as_of=exact)) == under({0: 104, 1: 24})
        # The option overrides the selection's frontier; histories take the same.
        chosen = seqlake.Selection(columns=tuple(columns), as_of=seqlake.Frontier({1: 0}))
        assert lake.history(user, chosen, as_of={1: 12}).equals(lake.history(user, columns=columns, as_of={1: 12}))
        assert keys(lake.histories([user], columns=columns, as_of=first)[user]) == under({0: 109, 1: 19})
        with pytest.raises(seqlake.SchemaError, match="has no snapshot 12345"):
            lake.history(user, as_of=12345)


def test_sql_binds_values_and_stays_read_only(lake):
    counted = lake.sql("SELECT count(*) AS n FROM history WHERE user_id = $uid", params={"uid": 33})
    assert counted["n"].tolist() == [USER_ROWS[33]]
    with pytest.raises(seqlake.SqlError, match="read-only"):
        lake.sql("COPY history TO 'out.csv'")


def test_capture_is_capture_requests_on_the_view_now(lake, small):
    history, detail = history_tables(small.config)
    tenant = Tenant(small.config, "ranking")
    now = datetime.now(UTC)
    requests = [Request(f"r{u}", u, now, False, 0, "feed", now.hour) for u in (11, 22, 44)]
    with ViewSnapshot(small.config, history, detail, landing_paths(small.config)) as view:
        expected = capture_requests(view, HistoryReader(history), tenant, requests, fragment_events=4)
    got = lake.capture(requests, tenant="ranking", fragment_events=4)
    assert [c.pointer for c in got] == [c.pointer for c in expected]
    for g, e in zip(got, expected, strict=True):
        assert g.sequence.equals(e.sequence) and g.fragment.equals(e.fragment)
        assert g.fragment.num_rows == min(4, g.pointer["length"]) and g.pointer["length"] > 0


def test_written_captures_rebuild_exactly_and_writing_them_again_appends_nothing(tmp_path):
    from datetime import timedelta

    from tests.cli.test_cli_capture import START, USERS, project

    folder = project(tmp_path)  # seqlake init, a CSV of ratings imported, ingested and compacted
    when = START + timedelta(hours=7)
    requests = [Request(f"q{u}", u, when, u % 2 == 1, 10 * u, "feed", when.hour) for u in USERS]
    with seqlake.open(folder / "seqlake.yaml") as lake:
        written = lake.write_captures(requests, tenant="ranking")
        assert (written.table, written.requests, written.appended, written.already_held) == (
            "training_ranking",
            len(USERS),
            len(USERS),
            0,
        )
        again = lake.write_captures(requests, tenant="ranking")
        assert (again.appended, again.already_held) == (0, len(USERS))
        rebuilt = lake.samples("ranking", compare=False)
        assert (rebuilt.requests, rebuilt.samples, rebuilt.quarantined) == (len(USERS), len(USERS), 0)


def test_capture_and_write_captures_refuse_the_past_unless_replayed(tmp_path):
    from datetime import timedelta

    from tests.cli.test_cli_capture import START, project, replayed_of

    folder = project(tmp_path)  # ratings of users 101, 202, 303 every 10 minutes for 6 hours
    past, live = START + timedelta(hours=3), START + timedelta(hours=7)
    requests = [Request("p101", 101, past, False, 0, "feed", past.hour)]
    with seqlake.open(folder / "seqlake.yaml") as lake:
        refused = "1 of 1 requests are in the past .*: 17 later events; oldest 2026-01-05T03:00:00Z.*seqlake backfill"
        with pytest.raises(seqlake.PastRequestError, match=refused):
            lake.capture(requests, tenant="ranking")
        with pytest.raises(seqlake.PastRequestError, match=refused):
            lake.write_captures(requests, tenant="ranking")
        [capture] = lake.capture(requests, tenant="ranking", replay=True)
        assert capture.sequence["event_ts"].to_pylist()[-1] > past  # the view of now: why it is refused
        assert capture.pointer["replayed"] is True
        [now] = lake.capture([Request("l101", 101, live, False, 0, "feed", live.hour)], tenant="ranking")
        assert now.pointer["replayed"] is False
        written = lake.write_captures(requests, tenant="ranking", replay=True)
        assert (written.appended, written.replayed) == (1, 1)
        normal = lake.write_captures([Request("l202", 202, live, False, 0, "feed", live.hour)], tenant="ranking")
        assert (normal.appended, normal.replayed) == (1, 0)
    assert replayed_of(folder) == {"p101": True, "l202": False}


def test_user_errors_are_seqlake_errors_and_nothing_is_created(small, tmp_path):
    lake = seqlake.open(small.config)
    with pytest.raises(seqlake.SchemaError, match="no tenant 'nope'"):
        lake.samples("nope")
    with pytest.raises(seqlake.SchemaError, match="training_ranking does not exist"):
        lake.samples("ranking")  # no capture was recorded in this warehouse
    with pytest.raises(seqlake.SchemaError, match="does not exist"):
        lake.history(11, table="nothing")
    elsewhere = small.config.model_copy(
        update={"warehouse": small.config.warehouse.model_copy(update={"path": str(tmp_path / "none")})}
    )
    with pytest.raises(seqlake.SetupError, match="no warehouse at"):
        seqlake.open(elsewhere).history(11)
    assert not (tmp_path / "none").exists()
    with pytest.raises(seqlake.ConfigError, match="cannot read configuration"):
        seqlake.open(tmp_path / "missing.yaml")


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_every_python_block_of_the_readme_and_the_docs_runs(config_file, monkeypatch, tmp_path):
    """README.md's blocks, then each docs/*.md page's, in order; a page's blocks share one namespace."""
    pages = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
    monkeypatch.chdir(tmp_path)  # ./seqlake.yaml: found as a user's would be
    namespaces: dict[str, dict[str, object]] = {}
    for page in pages:
        name = page.relative_to(REPO_ROOT).as_posix()
        namespace = namespaces[name] = {}
        for n, block in enumerate(python_blocks(page)):
            exec(compile(block, f"{name} python block {n + 1}", "exec"), namespace)  # noqa: S102
    readme = namespaces["README.md"]
    assert len(python_blocks(README)) >= 2
    capture = readme["capture"]
    assert isinstance(capture, Capture)  # what Lake.capture answers
    assert isinstance(readme["rows"], pa.Table) and capture.pointer["length"] > 0
    assert isinstance(namespaces["docs/python.md"]["known"], pa.Table)  # the read under a frontier
    assert isinstance(namespaces["docs/training.md"]["capture"], Capture)
    # The streamed rebuild took the one written capture. The small warehouse's history is synthetic
    # (its detail events do not fold into it), so the sample may fail its checksum there: then it is
    # left out and kept with its reason.
    training: dict[str, Any] = namespaces["docs/training.md"]
    assert training["stream"].requests == 1
    assert training["trained_on"] + training["stream"].quarantined.num_rows == 1
    assert namespaces["docs/training.md"]["labelled"] == 2  # the streamed backfill gave each label row back
