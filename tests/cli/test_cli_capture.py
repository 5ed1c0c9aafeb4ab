"""Your own events to verified training samples, through the commands a user runs on the in-process
engines: `init`, `import` of a CSV of events, `ingest`, `compact`, `capture` of a CSV of requests,
`samples` and `backfill`. Each request's sample rebuilds exactly (verified by its checksum), and a
capture run again appends nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from tests import forked_commands
from tests.pipelines.ingest.test_import_guards import MAPPING  # MovieLens-like ratings

USERS = (101, 202, 303)
START = datetime(2026, 1, 5, tzinfo=UTC)


def seqlake(folder: Path, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    """A command as a user runs it from the project folder `seqlake init` wrote (./seqlake.yaml)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    done = forked_commands.run(
        [sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env=env, cwd=folder
    )
    assert done.returncode == expect, f"seqlake {' '.join(args)}: {done.stderr}"
    return done


def project(tmp_path: Path, end_of_stream: bool = True) -> Path:
    """`seqlake init`, a CSV of ratings (every user, every 10 minutes for 6 hours) imported, ingested
    and compacted (`end_of_stream=False`: only the windows the watermark closed, the newest left in
    the landing tier, so the view's time is the newest rating's, 5h50)."""
    folder = tmp_path / "project"
    seqlake(tmp_path, "init", str(folder))
    lines = ["userId,movieId,rating,timestamp"]
    for n in range(36):
        moment = int((START + timedelta(minutes=10 * n)).timestamp())
        lines += [f"{user},{1000 + (user * 7 + n) % 50},{1 + n % 5},{moment}" for user in USERS]
    (folder / "ratings.csv").write_text("\n".join(lines) + "\n")
    (folder / "ratings.yaml").write_text(yaml.safe_dump(MAPPING, sort_keys=False))
    seqlake(folder, "import", "--mapping", "ratings.yaml", "--input", "ratings.csv")
    seqlake(folder, "ingest", "--engine", "duckdb")
    seqlake(folder, "compact", "--engine", "duckdb", *(["--end-of-stream"] if end_of_stream else []))
    return folder


def replayed_of(folder: Path) -> dict[str, bool | None]:
    """The `replayed` column of training_ranking, by request id."""
    from seqlake.core.config import load_config
    from seqlake.pipelines.tables import load_existing_table

    table = load_existing_table(load_config(folder / "seqlake.yaml"), "training_ranking")
    rows = table.scan(selected_fields=("request_id", "replayed")).to_arrow().to_pylist()
    return {row["request_id"]: row["replayed"] for row in rows}


def test_own_events_and_requests_rebuild_exactly_and_a_capture_run_again_appends_nothing(tmp_path: Path) -> None:
    folder = project(tmp_path)
    requests = ["request_id,user_id,request_ts,label_click"]
    requests += [
        f"q{user},{user},{(START + timedelta(hours=7)).isoformat()},{'true' if user % 2 else 'false'}" for user in USERS
    ]
    (folder / "requests.csv").write_text("\n".join(requests) + "\n")
    capture = ["capture", "--requests", "requests.csv", "--tenant", "ranking"]
    first = json.loads(seqlake(folder, *capture, "--output", "json").stdout)
    assert (first["appended"], first["already_held"]) == (len(USERS), 0)
    again = seqlake(folder, *capture)
    assert f"0 of {len(USERS)} requests captured into training_ranking, {len(USERS)} already held" in again.stdout

    done = json.loads(seqlake(folder, "samples", "--tenant", "ranking", "--output", "json").stdout)
    [ranking] = done["tenants"]
    assert (ranking["requests"], ranking["samples"], ranking["quarantined"]) == (len(USERS), len(USERS), 0)
    assert ranking["matched"] is None  # no fat rows of your own: the checksums are the check
    assert "no fat-row table to compare with" in seqlake(folder, "samples", "--tenant", "ranking").stdout

    labels = ["user_id,ts,clicked"] + [f"{user},{(START + timedelta(hours=3)).isoformat()},1" for user in USERS]
    (folder / "labels.csv").write_text("\n".join(labels) + "\n")
    backfill = json.loads(
        seqlake(folder, "backfill", "--labels", "labels.csv", "--tenant", "ranking", "--output", "json").stdout
    )
    assert backfill["rows"] == len(USERS), backfill


def test_a_past_request_is_refused_with_the_later_events_and_taken_with_replay(tmp_path: Path) -> None:
    """Two requests from the middle of the ratings (3 hours in) and one after them: captured now,
    the two would see the 17 ratings each of their users made later (every 10 minutes, 3h10 to
    5h50). The file is refused in one line, counting them and naming `seqlake backfill`; `--replay`
    takes it, and the training rows of the two record it."""
    folder = project(tmp_path)
    past, live = (START + timedelta(hours=3)).isoformat(), (START + timedelta(hours=7)).isoformat()
    rows = [f"p101,101,{past}", f"p202,202,{past}", f"l303,303,{live}"]
    (folder / "requests.csv").write_text("\n".join(["request_id,user_id,request_ts", *rows]) + "\n")
    capture = ["capture", "--requests", "requests.csv", "--tenant", "ranking"]
    refused = seqlake(folder, *capture, expect=1)
    assert refused.stderr.splitlines() == [
        "seqlake capture: error: capture: 2 of 3 requests are in the past (request_ts before events the view "
        "already holds: 34 later events; oldest 2026-01-05T03:00:00Z); past labels and requests are backfilled: "
        "seqlake backfill --labels FILE --tenant ranking --ts-column request_ts (or pass --replay, replay=True, "
        "to capture a live log replayed in real time)"
    ]
    from seqlake.core.config import load_config
    from seqlake.pipelines.tables import load_existing_table

    config = load_config(folder / "seqlake.yaml")
    assert load_existing_table(config, "training_ranking").current_snapshot() is None  # nothing appended

    replayed = json.loads(seqlake(folder, *capture, "--replay", "--output", "json").stdout)
    assert (replayed["appended"], replayed["replayed"]) == (3, 2)
    assert replayed_of(folder) == {"p101": True, "p202": True, "l303": False}
    snapshot = load_existing_table(config, "training_ranking").current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["seqlake.replayed-requests"] == "2"
    # A live request alone needs no flag, and its row records that it was not replayed.
    (folder / "live.csv").write_text(f"request_id,user_id,request_ts\nl101,101,{live}\n")
    done = seqlake(folder, "capture", "--requests", "live.csv", "--tenant", "ranking")
    assert "1 of 1 requests captured into training_ranking; next:" in done.stdout
    assert replayed_of(folder)["l101"] is False
    samples = json.loads(seqlake(folder, "samples", "--tenant", "ranking", "--output", "json").stdout)
    assert (samples["tenants"][0]["samples"], samples["tenants"][0]["quarantined"]) == (4, 0)


def test_a_request_at_the_views_time_is_live_and_one_older_than_the_tolerance_is_not(tmp_path: Path) -> None:
    """The newest ratings left in the landing tier: the view's time is the newest arrival (5h50). A request at
    that time is live; one of a user with no events, older than it by more than
    training.capture_tolerance_seconds (300), is refused, and one within the tolerance is not."""
    folder = project(tmp_path, end_of_stream=False)
    now = START + timedelta(hours=5, minutes=50)
    stale, skewed = now - timedelta(seconds=301), now - timedelta(seconds=299)
    (folder / "now.csv").write_text(f"request_id,user_id,request_ts\nn101,101,{now.isoformat()}\n")
    done = json.loads(
        seqlake(folder, "capture", "--requests", "now.csv", "--tenant", "ranking", "--output", "json").stdout
    )
    assert (done["appended"], done["replayed"]) == (1, 0)
    assert replayed_of(folder) == {"n101": False}

    (folder / "stale.csv").write_text(f"request_id,user_id,request_ts\ns999,999,{stale.isoformat()}\n")
    refused = seqlake(folder, "capture", "--requests", "stale.csv", "--tenant", "ranking", expect=1)
    assert refused.stderr.splitlines() == [
        "seqlake capture: error: capture: 1 of 1 requests are in the past (1 of them more than 300 s older than "
        "the view's time 2026-01-05T05:50:00Z; oldest 2026-01-05T05:44:59Z); past labels and requests are "
        "backfilled: seqlake backfill --labels FILE --tenant ranking --ts-column request_ts (or pass --replay, "
        "replay=True, to capture a live log replayed in real time)"
    ]
    (folder / "skewed.csv").write_text(f"request_id,user_id,request_ts\nk999,999,{skewed.isoformat()}\n")
    seqlake(folder, "capture", "--requests", "skewed.csv", "--tenant", "ranking")
    assert replayed_of(folder) == {"n101": False, "k999": False}


def test_a_requests_file_without_a_user_column_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    seqlake(tmp_path, "init", str(folder))
    (folder / "requests.csv").write_text("request_id,request_ts\nr1,2026-01-05T12:00:00Z\n")
    failed = seqlake(folder, "capture", "--requests", "requests.csv", "--tenant", "ranking", expect=1)
    assert failed.stderr.splitlines() == [
        "seqlake capture: error: --requests requests.csv: no column user_id (columns: ['request_id', 'request_ts'])"
    ]
    unknown = seqlake(folder, "capture", "--requests", "requests.csv", "--tenant", "nope", expect=2)
    assert "no tenant 'nope' in the configuration" in unknown.stderr
