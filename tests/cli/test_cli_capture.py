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


def project(tmp_path: Path) -> Path:
    """`seqlake init`, a CSV of ratings (every user, every 10 minutes for 6 hours) imported, ingested and compacted."""
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
    seqlake(folder, "compact", "--engine", "duckdb", "--end-of-stream")
    return folder


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
    5h50). The file is refused, naming them and `seqlake backfill`; `--replay` takes it and says so."""
    folder = project(tmp_path)
    past, live = (START + timedelta(hours=3)).isoformat(), (START + timedelta(hours=7)).isoformat()
    rows = [f"p101,101,{past}", f"p202,202,{past}", f"l303,303,{live}"]
    (folder / "requests.csv").write_text("\n".join(["request_id,user_id,request_ts", *rows]) + "\n")
    capture = ["capture", "--requests", "requests.csv", "--tenant", "ranking"]
    refused = seqlake(folder, *capture, expect=1)
    assert (
        "capture: 2 of 3 requests are in the past (the view already holds 34 rows of their users stamped after "
        "their request_ts; oldest request 2026-01-05T03:00:00Z). Past labels and requests are backfilled: "
        "seqlake backfill"
    ) in refused.stderr
    assert "--replay" in refused.stderr and "Traceback" not in refused.stderr
    from seqlake.core.config import load_config
    from seqlake.pipelines.tables import load_existing_table

    config = load_config(folder / "seqlake.yaml")
    assert load_existing_table(config, "training_ranking").current_snapshot() is None  # nothing appended

    replayed = json.loads(seqlake(folder, *capture, "--replay", "--output", "json").stdout)
    assert (replayed["appended"], replayed["replayed"]) == (3, 2)
    # The training table's append records it: its snapshot summary counts the replayed requests.
    snapshot = load_existing_table(config, "training_ranking").current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["seqlake.replayed-requests"] == "2"
    # A live request alone needs no flag.
    (folder / "live.csv").write_text(f"request_id,user_id,request_ts\nl101,101,{live}\n")
    done = seqlake(folder, "capture", "--requests", "live.csv", "--tenant", "ranking")
    assert "1 of 1 requests captured into training_ranking; next:" in done.stdout


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
