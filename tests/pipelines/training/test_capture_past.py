"""Captures refuse the past (`seqlake.pipelines.training.capture.past`), on a real lake: ratings of
users 101, 202 and 303 every 10 minutes for 6 hours, imported, ingested and compacted; and the
`replayed` pointer column, which training tables older than it read as null until a migration adds it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import seqlake
from seqlake import Request
from seqlake.core.config import load_config
from seqlake.core.errors import SchemaError
from seqlake.pipelines.maintenance.migrate import migrate
from seqlake.pipelines.tables import load_existing_table
from tests.cli.test_cli_capture import START, project, replayed_of


def request(request_id: str, user: int, hours: int, minutes: int = 0) -> Request:
    at = START + timedelta(hours=hours, minutes=minutes)
    return Request(request_id, user, at, False, 0, "feed", at.hour)


def test_later_events_are_counted_once_per_user_over_the_whole_batch(tmp_path: Path) -> None:
    """Two past requests of 101 (3h and 4h in), one of 202 (5h) and a live one of 303: the later
    events are 101's after its oldest request (17: 3h10 to 5h50) and 202's after 5h (5), each once."""
    folder = project(tmp_path)
    asked = [request("a", 101, 3), request("b", 101, 4), request("c", 202, 5), request("d", 303, 7)]
    with seqlake.open(folder / "seqlake.yaml") as lake:
        with pytest.raises(seqlake.PastRequestError) as refused:
            lake.capture(asked, tenant="ranking")
        assert str(refused.value).startswith(
            "capture: 3 of 4 requests are in the past (request_ts before events the view already holds: "
            "22 later events; oldest 2026-01-05T03:00:00Z); past labels and requests are backfilled: seqlake backfill"
        )
        captures = lake.capture(asked, tenant="ranking", replay=True)
        assert [c.pointer["replayed"] for c in captures] == [True, True, True, False]
        # A request at its user's newest event is not before it: live.
        [at_newest] = lake.capture([request("e", 101, 5, 50)], tenant="ranking")
        assert at_newest.pointer["replayed"] is False


def test_a_training_table_older_than_replayed_reads_and_migrates(tmp_path: Path) -> None:
    """A training table made before the column: samples rebuild it as before; a capture into it is
    told to migrate; `migrate` adds the column though the table holds captures (old rows read null),
    and captures then write it."""
    folder = project(tmp_path)
    config = load_config(folder / "seqlake.yaml")
    with seqlake.open(folder / "seqlake.yaml") as lake:
        lake.write_captures([request("old", 101, 7)], tenant="ranking")
    table = load_existing_table(config, "training_ranking")
    with table.update_schema() as update:  # the table as it was before the column
        update.delete_column("replayed")

    with seqlake.open(folder / "seqlake.yaml") as lake:
        rebuilt = lake.samples("ranking", compare=False)
        assert (rebuilt.requests, rebuilt.samples, rebuilt.quarantined) == (1, 1, 0)
        with pytest.raises(SchemaError, match=r"training_ranking: adds replayed \(boolean\).*seqlake migrate"):
            lake.write_captures([request("new", 202, 7)], tenant="ranking")

    changed = [d for d in migrate(config) if d.table.endswith("training_ranking")]
    assert [(d.added, d.refused) for d in changed] == [(("replayed (boolean)",), ())]
    assert load_existing_table(config, "training_ranking").schema().find_field("replayed").optional
    assert migrate(config) == []  # nothing left to do

    with seqlake.open(folder / "seqlake.yaml") as lake:
        lake.write_captures([request("new", 202, 7), request("past", 303, 3)], tenant="ranking", replay=True)
        rebuilt = lake.samples("ranking", compare=False)
        assert (rebuilt.requests, rebuilt.samples, rebuilt.quarantined) == (3, 3, 0)
    assert replayed_of(folder) == {"old": None, "new": False, "past": True}
