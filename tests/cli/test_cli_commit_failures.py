"""A commit that does not complete, as a user meets it: CLI commands in subprocesses on a small
warehouse, real servers.

- The Iceberg REST catalog server stopped in the middle of compaction's commit (before it applied the
  commit, and after it applied it but before it answered): one line that says what failed, that it may
  have been published, and that running the command again is safe; the server started again, the same
  command ends with every event once and fsck clean.
- An ingest that loses the race with a forget on the landing tier (the ingest stopped with SIGSTOP
  between its read of the landing table and its commit, the forget run meanwhile as a command of its
  own): it lands the batch again on the new snapshot by itself, says so on stderr, and ends with every
  event once; a second ingest lands nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.core.config import load_config
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import STOP_AT_ENV
from seqlake.pipelines.landing.delta_writer import open_table
from seqlake.pipelines.landing.tables import landing_paths
from tests.pipelines.compaction.test_no_event_lost import (
    EVENTS_PER_USER_HOUR,
    USERS,
    assert_every_event_once,
    import_lines,
    make_warehouse,
    ratings,
    seqlake,
)
from tests.rest_catalog_server import CommitCutter, running_rest_catalog

USER_ID_OFFSET = 1_000_000_000  # the movietweetings mapping's
FORGET_KEY = {"SEQLAKE_FORGET_KEY": "commit-failures-test-key-0123456789"}  # read where forget keeps keyed hashes


@pytest.mark.parametrize("applied", [False, True], ids=["before-it-applied-the-commit", "after-it-applied-it"])
def test_a_rest_catalog_stopped_mid_commit_is_one_line_and_the_rerun_is_exact(tmp_path: Path, applied: bool) -> None:
    catalog_root = tmp_path / "rest"
    catalog_root.mkdir()
    with (
        running_rest_catalog(catalog_root) as server,
        CommitCutter(server.uri, "history", server.stop, after_applied=applied) as front,
    ):
        config = make_warehouse(tmp_path / "lake", front.uri, {"catalog_type": "rest", "namespace": "cut"})
        lines = ratings(list(range(4)))
        import_lines(config, tmp_path, "four_hours", lines)

        failed = seqlake(config, "compact", "--end-of-stream", expect=1)
        assert front.cut_done.is_set(), "the compaction never committed to history"
        (line,) = failed.stderr.strip().splitlines()
        assert line.startswith("seqlake compact: error: publishing windows "), line
        assert "stopped answering (ConnectionError: the connection was dropped)" in line, line
        assert "it may have been published before the answer was lost" in line, line
        assert line.endswith("running the command again is safe: compaction publishes each window once"), line

        with running_rest_catalog(catalog_root) as again:
            front.reopen(again.uri)
            seqlake(config, "compact", "--end-of-stream")
            assert_every_event_once(config, len(lines))


def _landing_events(config_path: Path) -> pa.Table:
    table = open_table(landing_paths(load_config(str(config_path))).events)
    assert table is not None
    return table.to_pyarrow_table(columns=["user_id", "item_id", "event_ts"])


def test_an_ingest_that_loses_the_race_with_a_forget_lands_again_by_itself_and_ends_exact(tmp_path: Path) -> None:
    config = make_warehouse(tmp_path)
    first, second = ratings([0, 1]), ratings([2, 3], salt=1)
    import_lines(config, tmp_path, "first", first)
    seqlake(config, "compact", "--end-of-stream")
    pending = tmp_path / "second.dat"
    pending.write_text("\n".join(second) + "\n")
    seqlake(config, "import", "--mapping", "movietweetings", "--input", str(pending))

    # The ingest stops between its read of the landing table and its landing commit; the forget
    # rewrites the landing files that hold the user meanwhile.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    ingest = subprocess.Popen(
        [sys.executable, "-m", "seqlake.cli", "ingest", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env | FORGET_KEY | {STOP_AT_ENV: "ingest_quarantined"},
    )
    try:
        _, status = os.waitpid(ingest.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the ingest ended before its landing commit"
        forgotten = USER_ID_OFFSET + 3
        seqlake(config, "forget", "--user", str(forgotten), "--by", "test", env_extra=FORGET_KEY)
    finally:
        os.kill(ingest.pid, signal.SIGCONT)
    out, err = ingest.communicate(timeout=600)
    assert ingest.returncode == 0, err
    assert "Traceback" not in err, err
    (retried,) = [line for line in err.splitlines() if "landing it again" in line]
    assert "snapshot 2: another writer committed to the table first" in retried, retried
    assert retried.endswith("; landing it again on the new snapshot"), retried

    events = _landing_events(config)
    keys = list(zip(*(events[c].to_pylist() for c in events.column_names), strict=True))
    assert len(keys) == len(set(keys)), "a record landed twice"
    users = pc.value_counts(events["user_id"]).to_pylist()
    per_user = {item["values"]: item["counts"] for item in users}
    for user in range(USER_ID_OFFSET + 1, USER_ID_OFFSET + USERS + 1):
        if user != forgotten:
            assert per_user.get(user) == 4 * EVENTS_PER_USER_HOUR, user  # two hours of each file
    # The forget removed what had landed; what was pending lands at most once (none with forget's
    # tombstone, issue 44's forget part, which this test does not own).
    assert per_user.get(forgotten, 0) in (0, 2 * EVENTS_PER_USER_HOUR)

    again = seqlake(config, "ingest", env_extra=FORGET_KEY)
    assert "ingested 0 batches" in again.stdout, again.stdout
    assert _landing_events(config).num_rows == events.num_rows
    seqlake(config, "compact", "--end-of-stream", env_extra=FORGET_KEY)
    held = len(first) + len(second) - 4 * EVENTS_PER_USER_HOUR + per_user.get(forgotten, 0)
    assert_history_holds_each_event_once(config, held)


def assert_history_holds_each_event_once(config_path: Path, events: int) -> None:
    # assert_every_event_once without its fsck, whose landing checks are not this test's: delta-rs's
    # rewrite of the files a forget deletes from carries no page checksums.
    history, detail = history_tables(load_config(str(config_path)))
    rows = history.refresh().scan(selected_fields=("event_count",)).to_arrow()
    assert pc.sum(rows["event_count"]).as_py() == events
    ids = detail.refresh().scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) == events


def test_an_ingest_that_loses_the_race_twice_is_one_line_and_the_rerun_lands_each_record_once(
    tmp_path: Path, capsys, caplog, monkeypatch
) -> None:
    """Run in-process (the command line's `main`) so that a forget runs inside both landing attempts."""
    from seqlake.cli import main
    from seqlake.pipelines import faults
    from seqlake.pipelines.forget.remove import forget_users
    from seqlake.pipelines.landing.tables import LandingTier

    config = make_warehouse(tmp_path)
    import_lines(config, tmp_path, "first", ratings([0, 1]))
    seqlake(config, "compact", "--end-of-stream")
    pending = tmp_path / "second.dat"
    pending.write_text("\n".join(ratings([2, 3], salt=1)) + "\n")
    seqlake(config, "import", "--mapping", "movietweetings", "--input", str(pending))
    for name in [n for n in os.environ if n.startswith("SEQLAKE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv(*next(iter(FORGET_KEY.items())))
    loaded = load_config(str(config))
    forgotten = [USER_ID_OFFSET + 3, USER_ID_OFFSET + 4]

    def forget(user: int) -> None:
        forget_users(loaded, [user], landing=LandingTier(landing_paths(loaded)))

    def first_attempt() -> None:
        forget(forgotten[0])
        faults._actions["ingest_quarantined"] = lambda: forget(forgotten[1])  # inside the retry too

    capsys.readouterr()
    with faults.run_at("ingest_quarantined", first_attempt):
        assert main(["ingest", "--config", str(config)]) == 1
    (error,) = capsys.readouterr().err.strip().splitlines()
    (retried,) = [r.getMessage() for r in caplog.records if "landing it again" in r.getMessage()]
    assert retried.startswith("snapshot 2: another writer committed to the table first"), retried
    assert error.startswith("seqlake ingest: error: committing batch 2 to "), error
    assert "/landing/" in error and "another writer committed to the table first" in error, error
    assert error.endswith("nothing of it was published; running the command again is safe: each batch lands once"), (
        error
    )

    seqlake(config, "ingest", env_extra=FORGET_KEY)
    events = _landing_events(config)
    keys = list(zip(*(events[c].to_pylist() for c in events.column_names), strict=True))
    assert len(keys) == len(set(keys)), "a record landed twice"
    per_user = {item["values"]: item["counts"] for item in pc.value_counts(events["user_id"]).to_pylist()}
    for user in range(USER_ID_OFFSET + 1, USER_ID_OFFSET + USERS + 1):
        if user not in forgotten:
            assert per_user.get(user) == 4 * EVENTS_PER_USER_HOUR, user
