"""The benchmarks' realistic data looks like production data: wide hashed ids, Zipf popularity, users
returning to their interests, attributes of the item, bursty sessions."""

from __future__ import annotations

import json

import numpy as np

from benchmarks.shapes import INTEREST_ITEMS, RealisticValues, bursty_offsets, wide_ids


def test_realistic_values_have_wide_ids_popular_items_own_interests_and_item_attributes():
    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(1_000_000, 1_000_200, dtype=np.int64), 500)  # 200 users x 500 events
    values = RealisticValues(users, rng)
    n = len(users)
    items = values("item_id", "int64", n, rng)
    assert items.min() >= 2**47 and len(np.unique(items)) > 1000  # hashed, not small integers
    # Zipf popularity: the 1% most frequent items hold far more than 1% of the events.
    _, counts = np.unique(items, return_counts=True)
    top = np.sort(counts)[::-1][: max(1, len(counts) // 100)]
    assert top.sum() / n > 0.2
    # Users return to their own interest set: a user's items are far fewer than their events.
    per_user = [len(np.unique(items[users == u])) for u in np.unique(users)[:20]]
    assert max(per_user) < 500 - INTEREST_ITEMS
    # An item's attributes are the item's: one author, category and duration per item id.
    for name, kind in (("author_id", "int64"), ("category_id", "int32"), ("duration_ms", "int32")):
        attribute = values(name, kind, n, rng)
        pairs = np.unique(np.stack([items, attribute.astype(np.int64)]), axis=1)
        assert pairs.shape[1] == len(np.unique(items)), name
    assert values("author_id", "int64", n, rng).min() >= 2**47
    surfaces, shares = np.unique(values("surface", "string", n, rng), return_counts=True)
    assert len(surfaces) <= 6 and shares.max() / n > 0.3  # few and skewed
    assert wide_ids(np.arange(10)).tolist() == wide_ids(np.arange(10)).tolist()  # a hash: stable


def test_bursty_offsets_increase_per_user_in_sessions_of_seconds_hours_apart():
    rng = np.random.default_rng(5)
    lengths = np.array([2000, 3000])
    offsets = bursty_offsets(lengths, rng)
    for part in np.split(offsets, [2000]):
        gaps = np.diff(part) / 1e6
        assert (gaps > 0).all()
        # Most gaps are seconds inside a session; a few are hours between sessions.
        assert np.median(gaps) < 120 and (gaps > 3600).mean() > 0.01 and (gaps > 3600).mean() < 0.2


def test_a_bench_runs_on_small_ids_and_says_so(tmp_path, capsys):
    """`--data small-ids`, the easy case shown beside realistic data: the same bench, its rows checked
    against the plain path as on realistic data, and the report names the shape."""
    from seqlake.cli import main

    small = ["--users", "30", "--heavy-users", "1", "--heavy-rows", "300", "--runs", "2", "--multi-users", "8"]
    small += ["--lookups", "30", "--cache-mib", "1", "--repeats", "1", "--workers", "2"]
    for shape in ("small-ids", "realistic"):
        assert main(["bench-reads", *small, "--data", shape, "--json", str(tmp_path / f"{shape}.json")]) == 0
        assert f"{shape} data: 30 users" in capsys.readouterr().out
    realistic = json.loads((tmp_path / "realistic.json").read_text())
    small_ids = json.loads((tmp_path / "small-ids.json").read_text())
    assert realistic["data"] == "realistic" and small_ids["data"] == "small-ids" and realistic["ok"] and small_ids["ok"]
