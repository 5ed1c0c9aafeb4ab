"""A forget that commits inside another job's gap, between the job's read and its commit, on every
writer that reads and then commits: compaction batches (both engines, at each point of the gap),
merges (their commit is shared: on DuckDB), samples (both engines), a capture step and a backfill. The job
drops the forgotten users' rows or plans again: afterwards they have no row in any table (the
landing tier included), every other row is what the same steps leave without the forget, and fsck
finds no live row of a forgotten user.

Without the fence (`seqlake.tableformat.forgets.missed_users` answering no one) every case but the merges'
fails: the rows come back (a merge reads history alone, and a forget's commit there already fails
the merge's commit). A migration writes no row (schemas and properties only), and a forget refuses a
half-migrated warehouse (its tables differ from either configuration), so the two cannot interleave.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.spark import compact_batch
from seqlake.pipelines.faults import run_at
from seqlake.pipelines.forget.leftovers import forgotten_findings
from seqlake.pipelines.forget.remove import forget_users, tables_with_users
from seqlake.pipelines.landing.tables import LandingTier
from seqlake.pipelines.training.backfill.plan import write_backfill
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import Request, capture_batch, request_table
from seqlake.pipelines.training.capture.steps import CaptureState, append_step
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.rebuild.spark import write_spark_samples
from seqlake.pipelines.training.sequence import Tenant, tenants
from seqlake.pipelines.training.tables import (
    create_bucketed_table,
    fatrow_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.fsck import fsck_table
from seqlake.tableformat.reader import HistoryReader
from tests.pipelines.compaction.test_publication_races import Lake, closed_unpublished, deliver, new_lake

pytestmark = pytest.mark.spark  # Spark's writers are among those a forget meets

SEED = 4242  # every case and its run without the forget see the same stream


def landing_users(lake: Lake, windows: list[int] | None = None) -> list[int]:
    """The users with landed events (of `windows`, default all), the most active first."""
    where = "WHERE list_contains(?, window_id)" if windows is not None else ""
    with lake_cursor() as con:
        found = con.execute(
            f"SELECT user_id FROM delta_scan(?) {where} GROUP BY 1 ORDER BY count(*) DESC, 1",
            [lake.paths.events.removeprefix("file://"), *([windows] if windows is not None else [])],
        ).fetchall()
    return [u for (u,) in found]


def contents(lake: Lake, leaving_out: Sequence[int] = ()) -> dict[str, str]:
    """A digest of every table holding users (history included) and of the landing tier's events,
    each in any order; with `leaving_out`, without those users' rows."""
    history, _ = history_tables(lake.config)
    out = pa.array(list(leaving_out), pa.int64())
    found = {}
    for table in [history.refresh(), *tables_with_users(lake.config)]:
        found[table.name()[-1]] = _digest(table.scan().to_arrow(), out)
    with lake_cursor() as con:
        events = con.execute("SELECT * FROM delta_scan(?)", [lake.paths.events.removeprefix("file://")])
        found["landing/events"] = _digest(events.to_arrow_table(), out)
    return found


def _digest(rows: pa.Table, leaving_out: pa.Array) -> str:
    rows = rows.filter(pc.invert(pc.is_in(rows["user_id"], value_set=leaving_out)))
    return hashlib.sha256("\n".join(sorted(map(repr, rows.to_pylist()))).encode()).hexdigest()


def rows_of(lake: Lake, users: list[int]) -> dict[str, int]:
    """Rows of the users in every table and in the landing tier."""
    history, _ = history_tables(lake.config)
    wanted = pa.array(users, pa.int64())
    found = {}
    for table in [history.refresh(), *tables_with_users(lake.config)]:
        ids = table.scan(selected_fields=("user_id",)).to_arrow()["user_id"]
        found[table.name()[-1]] = pc.sum(pc.is_in(ids, value_set=wanted)).as_py() or 0
    with lake_cursor() as con:
        landed = con.execute(
            "SELECT count(*) FROM delta_scan(?) WHERE list_contains(?, user_id)",
            [lake.paths.events.removeprefix("file://"), users],
        ).fetchone()
    assert landed is not None  # an aggregate answers one row
    found["landing/events"] = landed[0]
    return found


# -- what each case runs before the writer under test -------------------------------------------------


def published_two(lake: Lake) -> list[int]:
    """Every window landed, the first two published (one run each); the rest wait."""
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    for window in windows[:2]:
        compact_batch_duckdb(lake.config, lake.paths, [window])
    return windows


def requests_for(lake: Lake, step: int) -> list[Request]:
    """Two requests of every landed user, the same in every run (not drawn from the active users,
    which a forget changes)."""
    at = datetime(2026, 1, 6, 12, tzinfo=UTC)
    users = sorted(landing_users(lake))
    return [Request(f"s{step}-{u}-{k}", u, at, k == 0, 10 * k, "feed", 12) for u in users for k in range(2)]


def capture(lake: Lake, step: int) -> None:
    """One capture step for both tenants (training and fat rows), as the serving loop appends it."""
    config = lake.config
    history, detail = history_tables(config)
    with ViewSnapshot(config, history, detail, lake.paths) as view:
        reader = HistoryReader(history)
        batch = request_table(requests_for(lake, step))
        for tenant in tenants(config):
            captured = capture_batch(view, reader, tenant, batch, config.training.fragment_events)
            training = create_bucketed_table(config, training_table_name(tenant), training_schema(tenant))
            fatrow = create_bucketed_table(config, fatrow_table_name(tenant), sequence_table_schema(tenant))
            state = CaptureState(step, step)
            append_step(training, captured.training, state, view.read_point)
            append_step(fatrow, captured.fat_rows, state, view.read_point)


def published_and_captured(lake: Lake) -> list[int]:
    """Captured with two windows published, then every window published: each capture rebuilds."""
    windows = published_two(lake)
    capture(lake, 1)
    compact_batch_duckdb(lake.config, lake.paths, windows[2:])
    return windows


def three_runs(lake: Lake) -> list[int]:
    """Three runs of one window each (max_runs 2: a merge is due)."""
    windows = published_two(lake)
    compact_batch_duckdb(lake.config, lake.paths, [windows[2]])
    return windows


def backfill(lake: Lake, windows: list[int]) -> object:
    """A backfill of a label row for every user of the waiting windows."""
    users = landing_users(lake, windows[2:])
    labels = pa.table(
        {"user_id": pa.array(users, pa.int64()), "ts": [datetime(2026, 1, 6, 12, tzinfo=UTC)] * len(users)}
    )
    return write_backfill(lake.config, labels, Tenant(lake.config, "ranking"))


# -- the cases -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    prepare: Callable[[Lake], list[int]]  # before the writer; returns the landed windows
    write: Callable[..., object]  # the writer under test: (spark, lake, windows)
    point: str  # where in its gap the forget runs (`seqlake.pipelines.faults`)


CASES = {
    **{
        f"duckdb batch@{point}": Case(
            published_two, lambda spark, lake, ws: compact_batch_duckdb(lake.config, lake.paths, ws[2:]), point
        )
        for point in ("before_write", "after_write", "after_detail")
    },
    **{
        f"spark batch@{point}": Case(
            published_two, lambda spark, lake, ws: compact_batch(spark, lake.config, lake.paths, ws[2:]), point
        )
        for point in ("after_write", "after_detail")
    },
    # A merge's gap ends in the commit both engines share (plan.commit_merge: a forget's commit fails
    # it); on DuckDB only.
    "duckdb merge": Case(three_runs, lambda spark, lake, ws: merge_runs_if_needed_duckdb(lake.config), "merge_written"),
    "capture step": Case(published_two, lambda spark, lake, ws: capture(lake, 1), "capture_appended"),
    "duckdb samples": Case(
        published_and_captured,
        lambda spark, lake, ws: write_arrow_samples(lake.config, Tenant(lake.config, "ranking"), compare=False),
        "samples_written",
    ),
    "spark samples": Case(
        published_and_captured,
        lambda spark, lake, ws: write_spark_samples(spark, lake.config, Tenant(lake.config, "ranking")),
        "samples_rebuilt",
    ),
    "backfill": Case(published_two, lambda spark, lake, ws: backfill(lake, ws), "backfill_written"),
}


def run_case(spark, lake_config, case: Case, forget: bool) -> tuple[Lake, list[int]]:
    lake = new_lake(lake_config, max_runs=2, seed=SEED)
    windows = case.prepare(lake)
    users = landing_users(lake, windows[:2])[:2]  # the most active users of published windows
    if forget:
        with run_at(case.point, lambda: forget_users(lake.config, users, landing=LandingTier(lake.paths))):
            case.write(spark, lake, windows)
    else:
        case.write(spark, lake, windows)
    return lake, users


_clean: dict[str, dict[str, str]] = {}
# Both engines' batches publish the same content from the same plan
# (tests/pipelines/compaction/test_batch_compaction.py): Spark's case is held to DuckDB's run without the forget.
SAME_CONTENT_AS = {"spark batch": "duckdb batch"}


@pytest.mark.parametrize("name", list(CASES))
def test_a_forget_inside_a_writers_gap_stays_forgotten_and_leaves_every_other_row(spark, lake_config, name):
    case = CASES[name]
    lake, users = run_case(spark, lake_config, case, forget=True)
    held = rows_of(lake, users)
    assert held == dict.fromkeys(held, 0), held
    base_key = SAME_CONTENT_AS.get(name.split("@")[0], name.split("@")[0])
    if base_key not in _clean:
        clean, _ = run_case(spark, lake_config, case, forget=False)
        # The run without the forget held the users: the check above could fail.
        assert any(rows_of(clean, users).values())
        _clean[base_key] = contents(clean, users)
    assert contents(lake) == _clean[base_key]
    history, _ = history_tables(lake.config)
    fsck_table(history.refresh())
    assert forgotten_findings(lake.config, lake.paths) == []
