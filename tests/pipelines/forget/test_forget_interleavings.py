"""Forget in any order with the other jobs, some of them killed: a property test.

Hypothesis draws interleavings of ingest steps, compaction batches (in any order), merges, capture
steps, samples and forgets; any job may be killed at one of its commit points (in-process: an
exception no job catches, raised where `SEQLAKE_KILL_AT` would kill it), and a forget may run inside
another job's gap between its read and its commit. A killed forget is run again at the end. The
stream stops sending a user's events once the user is forgotten (events arriving later would be new
data). At the end, with the stream delivered and every window published: no forgotten user has a
row in any table or in the landing tier, every other valid event is in history exactly once, and
fsck finds nothing. `SEQLAKE_FORGET_EXAMPLES` sets how many interleavings are drawn (3 by default;
more for a long run).
"""

from __future__ import annotations

import os
from contextlib import suppress

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import run_at
from seqlake.pipelines.forget.leftovers import forgotten_findings
from seqlake.pipelines.forget.remove import forget_users, tables_with_users
from seqlake.pipelines.landing.tables import LandingTier
from seqlake.pipelines.training.rebuild.samples import write_arrow_samples
from seqlake.pipelines.training.sequence import Tenant, tenants
from seqlake.pipelines.training.tables import training_table_name
from tests.pipelines.compaction.test_publication_races import (
    Lake,
    assert_every_valid_event_once,
    closed_unpublished,
    deliver,
    example_seed,
    new_lake,
)
from tests.pipelines.forget.test_forget_fence import capture, landing_users, rows_of

EXAMPLES = int(os.environ.get("SEQLAKE_FORGET_EXAMPLES", "3"))

KILLS = {
    "compact": ("before_write", "after_write", "after_detail", "after_commit"),
    "merge": ("merge_written", "merge_committed"),
    "capture": ("capture_appended",),
    "samples": ("samples_written", "samples_committed"),
    "forget": ("forget_audited", "forget_written", "forget_committed"),
}
GAPS = {  # where a forget can run inside a job's gap between its read and its commit
    "compact": ("before_write", "after_write", "after_detail"),
    "merge": ("merge_written",),
    "capture": ("capture_appended",),
    "samples": ("samples_written",),
}
JOBS = sorted(KILLS)


class Killed(BaseException):
    """The job stops here as if killed: no job catches it."""


def _killed() -> None:
    raise Killed


@st.composite
def steps(draw):
    job = draw(st.sampled_from(["ingest", *JOBS]))
    argument = draw(st.integers(0, 7))
    fault = draw(st.sampled_from(["none", "kill", "forget inside"] if job in GAPS else ["none", "kill"]))
    point = None
    if fault == "kill":
        point = draw(st.sampled_from(KILLS[job])) if job in KILLS else None
    elif fault == "forget inside":
        point = draw(st.sampled_from(GAPS[job]))
    return job, argument, fault if point else "none", point


class Run:
    """One interleaving on a fresh lake; the users it forgot, and the forgets a kill left unfinished."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.forgotten: set[int] = set()
        self.unfinished: list[list[int]] = []
        self.captures = 0

    def forget(self, users: list[int]) -> None:
        self.forgotten.update(users)
        self.stop_sending()
        try:
            forget_users(self.lake.config, users, landing=LandingTier(self.lake.paths))
        except Killed:
            self.unfinished.append(users)
            raise

    def stop_sending(self) -> None:
        """The stream's chunks not delivered yet lose the forgotten users' records."""
        named = "|".join(str(u) for u in sorted(self.forgotten))
        pattern = rf'"user_id"\s*:\s*"?({named})"?\s*[,}}]'
        for n in range(self.lake.delivered, len(self.lake.chunks)):
            chunk = self.lake.chunks[n]
            self.lake.chunks[n] = chunk.filter(pc.invert(pc.match_substring_regex(chunk["payload"], pattern)))

    def pick_users(self, argument: int) -> list[int]:
        landed = [u for u in landing_users(self.lake) if u not in self.forgotten]
        return [landed[argument % len(landed)]] if landed else []

    def job(self, name: str, argument: int):
        config, paths = self.lake.config, self.lake.paths
        if name == "ingest":
            return lambda: deliver(self.lake)
        if name == "compact":
            waiting = closed_unpublished(self.lake)
            stride = 1 + argument % 3
            batch = waiting[argument % max(len(waiting), 1) :: stride]
            return (lambda: compact_batch_duckdb(config, paths, batch)) if batch else None
        if name == "merge":
            return lambda: merge_runs_if_needed_duckdb(config)
        if name == "capture":
            if not self.lake.delivered:
                return None
            self.captures += 1
            return lambda step=self.captures: capture(self.lake, step)
        if name == "samples":
            catalog = open_catalog(config)
            tenant = tenants(config)[argument % 2]
            if not catalog.table_exists(table_identifier(config, training_table_name(tenant))):
                return None
            return lambda: write_arrow_samples(config, tenant, compare=False)
        users = self.pick_users(argument)
        return (lambda: self.forget(users)) if users else None

    def step(self, name: str, argument: int, fault: str, point: str | None) -> None:
        action = self.job(name, argument)
        if action is None:
            return
        if fault == "kill":
            assert point is not None
            with run_at(point, _killed), suppress(Killed):  # what it left is what the next jobs meet
                action()
        elif fault == "forget inside":
            assert point is not None
            users = self.pick_users(argument + 1)
            if users:
                with run_at(point, lambda: self.forget(users)):
                    action()
            else:
                action()
        else:
            action()

    def finish(self, race: tuple[str, str, int]) -> None:
        """Killed forgets run again; the rest of the stream arrives; a forget runs inside one more
        job's gap (`race`: the job, the point, which user); every window is published."""
        for users in self.unfinished:
            forget_users(self.lake.config, users, landing=LandingTier(self.lake.paths))
        deliver(self.lake, len(self.lake.chunks))
        job, point, argument = race
        if job == "samples" and self.job("samples", argument) is None:
            self.step("capture", argument, "none", None)  # samples rebuild captures
        if job == "compact":  # the stream has ended: every waiting window, the last one included
            waiting = closed_unpublished(self.lake, end_of_stream=True)
            users = self.pick_users(argument)
            with run_at(point, lambda: self.forget(users)):
                compact_batch_duckdb(self.lake.config, self.lake.paths, waiting)
        else:
            self.step(job, argument, "forget inside", point)
        for window in closed_unpublished(self.lake, end_of_stream=True):
            compact_batch_duckdb(self.lake.config, self.lake.paths, [window])
            merge_runs_if_needed_duckdb(self.lake.config)
        catalog = open_catalog(self.lake.config)
        for tenant in tenants(self.lake.config):
            if catalog.table_exists(table_identifier(self.lake.config, training_table_name(tenant))):
                write_arrow_samples(self.lake.config, Tenant(self.lake.config, tenant.name), compare=False)


RACES = st.tuples(st.sampled_from(["compact", "capture", "samples"]), st.integers(0, 7)).flatmap(
    lambda pick: st.tuples(st.just(pick[0]), st.sampled_from(GAPS[pick[0]]), st.just(pick[1]))
)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(plan=st.lists(steps(), min_size=4, max_size=9), first=st.integers(0, 7), race=RACES)
def test_any_interleaving_with_forgets_and_kills_keeps_them_forgotten_and_every_other_event_once(
    lake_config, plan, first, race
):
    lake = new_lake(lake_config, max_runs=2, seed=example_seed(plan, first, race))
    run = Run(lake)
    deliver(lake)
    run.forget(run.pick_users(first))  # at least one forget in every interleaving
    for step in plan:
        run.step(*step)
    run.finish(race)
    forgotten = sorted(run.forgotten)
    held = rows_of(lake, forgotten)
    assert held == dict.fromkeys(held, 0), (plan, held)
    assert_every_valid_event_once(lake)
    assert forgotten_findings(lake.config, lake.paths) == []
    # The users are gone, not the lake: the other users' rows are there.
    history, _ = history_tables(lake.config)
    users = pc.unique(history.refresh().scan(selected_fields=("user_id",)).to_arrow()["user_id"])
    assert len(users) and not pc.any(pc.is_in(users, value_set=pa.array(forgotten, pa.int64()))).as_py()
    assert tables_with_users(lake.config)
