"""The size-tiered merge policy as pure functions of run sizes: which runs merge, how many runs stay,
and how often a row is rewritten."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlake.core.config import load_config
from seqlake.pipelines.compaction.merge_policy import MergePolicy, merged_sizes, policy_of, runs_to_merge

DEFAULT = MergePolicy()
policies = st.builds(
    MergePolicy,
    max_runs=st.integers(1, 12),
    size_ratio_percent=st.integers(0, 200),
    max_size_amplification_percent=st.integers(0, 10_000),
    min_merge_width=st.integers(2, 8),
)
sizes = st.lists(st.integers(0, 10_000), max_size=40)


def simulate(policy: MergePolicy, window_rows: list[int]) -> tuple[float, int]:
    """(rows rewritten per row ingested, most runs ever live) when each window adds one run and one
    merge decision follows, as `seqlake compact` does."""
    runs: list[int] = []
    rewritten = most = 0
    for rows in window_rows:
        runs.append(rows)
        most = max(most, len(runs))
        runs, merged = merged_sizes(runs, policy)
        rewritten += merged
    return rewritten / sum(window_rows), most


@given(sizes, policies)
def test_a_pick_is_none_or_a_suffix_of_at_least_two_runs(run_sizes: list[int], policy: MergePolicy) -> None:
    picked = runs_to_merge(run_sizes, policy)
    assert picked == 0 or 2 <= picked <= len(run_sizes)
    after, rewritten = merged_sizes(run_sizes, policy)
    assert sum(after) == sum(run_sizes)  # a merge keeps every row
    assert rewritten == (sum(run_sizes[len(run_sizes) - picked :]) if picked else 0)
    assert after[: len(run_sizes) - picked] == run_sizes[: len(run_sizes) - picked]  # older runs untouched


@given(sizes, policies)
def test_one_decision_brings_a_table_one_run_over_the_trigger_back_under_it(
    run_sizes: list[int], policy: MergePolicy
) -> None:
    run_sizes = run_sizes[: policy.max_runs + 1]
    after, _ = merged_sizes(run_sizes, policy)
    assert len(after) <= policy.max_runs


@settings(max_examples=30)
@given(st.lists(st.integers(1, 5_000), min_size=100, max_size=400), st.integers(0, 2**31))
def test_files_per_lookup_stay_within_the_trigger_plus_one(window_rows: list[int], _seed: int) -> None:
    _, most = simulate(DEFAULT, window_rows)
    assert most <= DEFAULT.max_runs + 1


@pytest.mark.parametrize("windows", [100, 300, 1000])
def test_the_default_policy_rewrites_a_row_a_logarithmic_number_of_times(windows: int) -> None:
    amplification, _ = simulate(DEFAULT, [1_000] * windows)
    # Runs of similar size merge min_merge_width at a time: a row moves up one tier per rewrite.
    assert amplification <= math.log(windows, DEFAULT.min_merge_width) + 1
    assert simulate(DEFAULT, [1_000] * 100)[0] <= 4  # the benchmark's target


def test_merging_everything_above_the_trigger_rewrites_quadratically() -> None:
    """The old capacity merge (all runs into one above max_runs), as a policy: the baseline."""
    everything = MergePolicy(
        max_runs=4, size_ratio_percent=10**9, max_size_amplification_percent=10**9, min_merge_width=6
    )
    assert runs_to_merge([5, 1, 1, 1, 1], everything) == 5
    assert simulate(everything, [1_000] * 300)[0] > 3 * simulate(DEFAULT, [1_000] * 300)[0]


def test_size_ratio_merges_similar_runs_and_leaves_a_large_old_one() -> None:
    policy = MergePolicy(max_runs=10, size_ratio_percent=10, max_size_amplification_percent=400, min_merge_width=4)
    assert runs_to_merge([100, 10, 10, 10, 10], policy) == 4
    assert runs_to_merge([100, 40, 10, 10, 10], policy) == 0  # three similar runs are not enough
    assert runs_to_merge([10, 10, 10, 10, 10, 10], policy) == 6
    # Newer runs together far above the oldest: everything merges (size amplification).
    assert runs_to_merge([10, 40, 30, 5], policy) == 4


def test_the_configuration_sets_the_policy() -> None:
    config = load_config()
    policy = policy_of(config)
    assert policy.max_runs == config.layout.max_runs
    assert policy.min_merge_width == config.merge.min_merge_width
    assert policy.size_ratio_percent == config.merge.size_ratio_percent
    assert policy.max_size_amplification_percent == config.merge.max_size_amplification_percent
