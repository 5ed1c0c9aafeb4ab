"""The demo report's verdict: its headline figures, each against its target, met or not in words.

The targets are the pitch's: seqlake stores less than the fat rows it replaces, a trainer building
samples from pointers waits little longer than one reading fat rows (the samples benchmark's targets,
README), and every rebuilt sample is exactly what inference saw.
"""

from __future__ import annotations

from typing import Any

# What a trainer reads (the verified stream) over a scan of the same samples' fat rows, per tenant;
# other tenants take DEFAULT. The samples job, which writes a table, over a copy of the fat rows.
SAMPLES_TIME_TARGETS = {"ranking": 1.5, "retrieval": 1.5}
DEFAULT_SAMPLES_TIME_TARGET = 1.5
SAMPLES_JOB_TARGET = 1.2
STORAGE_TARGET = 1.0  # (pointers + fragments + history [+ detail]) over the fat rows: less than them


def check(measured: float, target: float, what: str) -> dict[str, Any]:
    """One verdict line: the figure, `<= target`, and met or not met."""
    return {"measured": measured, "target": f"<= {target:g}", "verdict": _met(measured <= target), "what": what}


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def verdict(facts: dict[str, dict[str, Any]], tenants: list[str], retention_windows: int) -> dict[str, Any]:
    """The verdict of a demo report's sections (`storage`, `tenant_<name>`, `generated`)."""
    storage = facts["storage"]
    windows = facts["generated"]["windows"]
    lines: dict[str, Any] = {
        "storage_at_this_horizon": check(
            storage["normalized_plus_history_and_detail_vs_fat_row"],
            STORAGE_TARGET,
            f"all tables over the fat rows after {windows} windows; detail keeps every one of them",
        ),
        "storage_at_steady_state": check(
            storage["normalized_plus_history_vs_fat_row"],
            STORAGE_TARGET,
            f"the same once detail is bounded by its retention ({retention_windows} windows) and the rest "
            "grows with time: the ratio without detail",
        ),
    }
    for name in tenants:
        tenant = facts[f"tenant_{name}"]
        target = SAMPLES_TIME_TARGETS.get(name, DEFAULT_SAMPLES_TIME_TARGET)
        lines[f"samples_time_{name}"] = check(
            tenant["samples_time_vs_fat_row_read"],
            target,
            "the verified samples stream over a pyarrow scan of its fat rows",
        )
        lines[f"samples_job_{name}"] = check(
            tenant["samples_job_vs_fat_row_copy"],
            SAMPLES_JOB_TARGET,
            "the samples job (rebuild, verify, write the table) over the fat rows read and written again",
        )
    exact = [facts[f"tenant_{name}"] for name in tenants]
    all_exact = all(
        t["exact_match_lsn"] == 1
        and t["spark_exact_match_lsn"] == 1
        and t["checksum_failures_lsn"] == 0
        and t["spark_checksum_failures"] == 0
        for t in exact
    )
    lines["exact"] = {
        "measured": "; ".join(
            f"{name}: in-process {t['exact_match_lsn']:.2%}, spark {t['spark_exact_match_lsn']:.2%}, "
            f"{t['checksum_failures_lsn'] + t['spark_checksum_failures']} checksum failures"
            for name, t in zip(tenants, exact, strict=True)
        ),
        "target": "100% on both engines, 0 checksum failures",
        "verdict": _met(all_exact),
        "what": "samples rebuilt from pointers equal to the fat rows inference logged",
    }
    return lines
