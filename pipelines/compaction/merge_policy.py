"""Which sorted runs to merge: a size-tiered ("universal") policy over the runs' sizes.

Runs are listed oldest first. A merge always takes the newest k runs (a suffix), so the merged run
keeps its place in age order and the list stays ordered oldest first by construction. Three rules,
in this order, in the spirit of RocksDB's universal compaction and Apache Paimon's:

1. Size amplification: when the runs newer than the oldest together exceed
   `max_size_amplification_percent` of the oldest run, every run merges. History runs never
   overwrite each other's rows, so this rule only bounds how far the newer tiers may outgrow the
   oldest; set it high to keep full rewrites rare.
2. Size ratio: starting from the newest run, the next older run joins while it is no larger than
   the candidate so far grown by `size_ratio_percent`; a candidate of at least `min_merge_width` runs
   merges. Runs of similar size merge together, so a row joins a run `min_merge_width` or more times
   its size at each rewrite: it is rewritten O(log n) times over n windows.
3. Run count: more than `max_runs` runs force a merge of the newest ones, enough to come back to
   `max_runs`, extended by the size ratio rule.

Rules 1 and 2 only apply once the table holds `min_merge_width` runs. These are pure functions of the
run sizes (rows): the compaction jobs of both engines and the merge benchmark call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seqlake.core.config import Config


@dataclass(frozen=True)
class MergePolicy:
    max_runs: int = 10
    size_ratio_percent: int = 10
    max_size_amplification_percent: int = 400
    min_merge_width: int = 4

    def __post_init__(self) -> None:
        if self.max_runs < 1 or self.min_merge_width < 2:
            raise ValueError("max_runs must be at least 1 and min_merge_width at least 2")
        if self.size_ratio_percent < 0 or self.max_size_amplification_percent < 0:
            raise ValueError("size_ratio_percent and max_size_amplification_percent must not be negative")


def policy_of(config: Config) -> MergePolicy:
    """The configured policy: `layout.max_runs` and the `merge` section."""
    merge = config.merge
    return MergePolicy(
        max_runs=config.layout.max_runs,
        size_ratio_percent=merge.size_ratio_percent,
        max_size_amplification_percent=merge.max_size_amplification_percent,
        min_merge_width=merge.min_merge_width,
    )


def runs_to_merge(sizes: Sequence[int], policy: MergePolicy) -> int:
    """How many of the newest runs to merge into one (0: none). `sizes` are the runs' rows, oldest
    first. The result is 0 or between 2 and len(sizes)."""
    count = len(sizes)
    if count < 2:
        return 0
    if count >= policy.min_merge_width:
        newer = sum(sizes[1:])
        if newer * 100 > policy.max_size_amplification_percent * max(sizes[0], 0):
            return count
        picked = _grow_by_size_ratio(sizes, 1, policy.size_ratio_percent)
        if picked >= policy.min_merge_width:
            return picked
    if count > policy.max_runs:
        return _grow_by_size_ratio(sizes, count - policy.max_runs + 1, policy.size_ratio_percent)
    return 0


def _grow_by_size_ratio(sizes: Sequence[int], start: int, ratio_percent: int) -> int:
    """The newest `start` runs, then each next older run while it is no larger than the candidate's
    size grown by the ratio."""
    newest_first = list(reversed(sizes))
    picked = max(start, 1)
    candidate = sum(newest_first[:picked])
    while picked < len(newest_first) and candidate * (100 + ratio_percent) >= newest_first[picked] * 100:
        candidate += newest_first[picked]
        picked += 1
    return picked


def merged_sizes(sizes: Sequence[int], policy: MergePolicy) -> tuple[list[int], int]:
    """The run sizes after one decision, and the rows that decision rewrites (0: no merge)."""
    picked = runs_to_merge(sizes, policy)
    if picked == 0:
        return list(sizes), 0
    kept, merged = list(sizes[: len(sizes) - picked]), sum(sizes[len(sizes) - picked :])
    return [*kept, merged], merged
