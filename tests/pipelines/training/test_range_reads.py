"""Time-range reads never return a row with content from `end` on, on a real lake (Iceberg history and
detail, DuckDB ingest and compaction), through `Lake.history`/`histories` and `seqlake history --end`.

One user views item 7 and buys it ten minutes later in the same hourly window: its history row holds
both and is stamped with the view. A read that ends between them returns the row as the fold of the
view alone (`test_aggregation_properties.reference_fold` of the lake's own detail events before
`end`); once that window's detail is dropped (`seqlake gc --retention-windows 1`), the row is
withheld and the read says so.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml

import seqlake
from seqlake.core.config import parse_config
from seqlake.jobs.detail_gc import main as gc_main
from seqlake.jobs.history import main as history_main
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.reads.bounded import WithheldRowsWarning, withheld_rows
from tests.pipelines.compaction.test_aggregation_properties import reference_fold
from tests.pipelines.training.test_point_in_time import BUY, T0, VIEW, detail_events, land

USER = 31_337
END = T0 + timedelta(minutes=15)  # after the view of item 7, before its buy


def range_config(lake_config, tmp_path):
    data = lake_config.model_dump(mode="json")
    data["warehouse"]["namespace"] = "range_reads"
    data["tenants"] = {}
    config = parse_config(data, "test")
    path = tmp_path / "seqlake.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return config, path


def event(minutes: int, item: int, flags: int, watch: int) -> dict:
    return {
        "user_id": USER,
        "item_id": item,
        "event_ts": T0 + timedelta(minutes=minutes),
        "flags": flags,
        "watch": watch,
    }


def fold_before(config, events: list[dict], end) -> list[dict]:
    """The reference: each window's events of the user with event_ts < end, folded, in sequence order."""
    known = [e for e in events if e["user_id"] == USER and e["event_ts"] < end]
    rows = []
    for window in sorted({e["window_id"] for e in known}):
        rows += reference_fold(config, [e for e in known if e["window_id"] == window])
    return sorted(rows, key=lambda r: (r["event_ts"], r["lsn"], r["source_partition"]))


def plain(rows) -> list[dict]:
    return rows.to_pylist()


@pytest.fixture(scope="module")
def lake(lake_config, tmp_path_factory):
    config, path = range_config(lake_config, tmp_path_factory.mktemp("range_reads"))
    reset_demo_tables(config)
    land(
        config,
        [event(5, 8, VIEW, 300), event(10, 7, VIEW, 500), event(20, 7, BUY, 0), event(40, 9, VIEW, 100)],
        None,
        first_lsn=1,
    )
    return config, path


def history_cli(path, *args: str) -> int:
    return history_main(["--config", str(path), "--user", str(USER), *args])


def test_a_read_ending_between_a_view_and_its_buy_returns_the_view_alone(lake, capsys):
    config, path = lake
    events = detail_events(config)
    stored = [r for r in history_tables(config)[0].refresh().scan().to_arrow().to_pylist() if r["item_id"] == 7]
    assert len(stored) == 1 and stored[0]["event_count"] == 2 and stored[0]["action_flags"] == VIEW | BUY

    want = fold_before(config, events, END)
    with seqlake.open(config) as opened:
        rows = opened.history(USER, end=END)
        assert "last_event_ts" in rows.column_names  # every column asked for: the latest event too
        assert plain(rows) == [{c: r[c] for c in rows.column_names} for r in want]
        seven = [r for r in rows.to_pylist() if r["item_id"] == 7]
        assert [(r["action_flags"], r["event_count"], r["watch_time_ms"]) for r in seven] == [(VIEW, 1, 500)]
        assert seven[0]["event_ts"] == T0 + timedelta(minutes=10)  # stamped with its earliest event
        assert withheld_rows(rows) == 0

        # Top-K, newest first and a start apply after the rebuild; histories agree with history.
        top = opened.history(USER, end=END, top_k=1, newest_first=True, columns=["item_id", "action_flags"])
        assert top.to_pylist() == [{"item_id": 7, "action_flags": VIEW}]
        ranged = opened.history(USER, start=T0 + timedelta(minutes=6), end=END, columns=["item_id", "event_count"])
        assert ranged.to_pylist() == [{"item_id": 7, "event_count": 1}]
        assert plain(opened.histories([USER], end=END)[USER]) == plain(rows)
        assert plain(opened.history(USER, end=END, fresh=True)) == plain(rows)  # nothing landed since

        # Without an end, or an end after the buy, the stored row is returned as it is.
        whole = opened.history(USER, columns=["item_id", "action_flags", "event_count"])
        assert {"item_id": 7, "action_flags": VIEW | BUY, "event_count": 2} in whole.to_pylist()
        later = opened.history(USER, end=T0 + timedelta(minutes=30), columns=["item_id", "action_flags"])
        assert later.to_pylist() == [
            {"item_id": 8, "action_flags": VIEW},
            {"item_id": 7, "action_flags": VIEW | BUY},
        ]

    # The same through the command line.
    assert history_cli(path, "--end", END.isoformat(), "--columns", "item_id,action_flags,event_count") == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0].split() == ["feature_group", "event_ts", "lsn", "item_id", "action_flags", "event_count"]
    body = [line.split() for line in lines[2:]]
    assert [(int(c[3]), int(c[4]), int(c[5])) for c in body] == [(8, VIEW, 1), (7, VIEW, 1)]
    assert "withheld" not in printed.err
    assert history_cli(path, "--end", END.isoformat(), "--output", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["withheld"] == 0
    assert [(r["item_id"], r["action_flags"]) for r in document["rows"]] == [(8, VIEW), (7, VIEW)]


@pytest.mark.spark
def test_spark_history_reads_with_an_end_rebuild_the_row_as_well(lake, spark):
    from seqlake.pipelines.reads.spark import history_df, order_sequence, withheld_df
    from seqlake.tableformat.reader import Selection

    config, _ = lake
    selection = Selection(columns=("item_id", "action_flags", "event_count"), end=END)
    rows = order_sequence(history_df(spark, config, selection, [USER])).collect()
    assert [(r["item_id"], r["action_flags"], r["event_count"]) for r in rows] == [(8, VIEW, 1), (7, VIEW, 1)]
    assert withheld_df(spark, config, selection, [USER]).count() == 0


def test_a_row_whose_window_detail_expired_is_withheld_and_the_read_says_so(lake, capsys):
    config, path = lake
    # A newer window, so that gc keeps only it: the first window's detail is dropped.
    land(config, [event(3 * 60, 11, VIEW, 1)], None, first_lsn=100)
    assert gc_main(["--config", str(path), "--retention-windows", "1"]) == 0
    capsys.readouterr()
    assert all(e["event_ts"] >= T0 + timedelta(hours=3) for e in detail_events(config))

    with seqlake.open(config) as opened:
        with pytest.warns(WithheldRowsWarning, match="1 history row withheld") as caught:
            rows = opened.history(USER, end=END, columns=["item_id", "action_flags"])
        warning = caught[0].message
        assert isinstance(warning, WithheldRowsWarning) and warning.withheld == 1
        assert rows.to_pylist() == [{"item_id": 8, "action_flags": VIEW}]  # the single view is whole
        assert withheld_rows(rows) == 1
        with pytest.warns(WithheldRowsWarning):
            many = opened.histories([USER], end=END, columns=["item_id", "action_flags"])
        assert many[USER].to_pylist() == rows.to_pylist()

    assert history_cli(path, "--end", END.isoformat(), "--columns", "item_id,action_flags") == 0
    printed = capsys.readouterr()
    assert [int(line.split()[3]) for line in printed.out.splitlines()[2:]] == [8]
    assert "1 row withheld (merged events from --end on; detail expired)" in printed.err
    assert history_cli(path, "--end", END.isoformat(), "--output", "json") == 0
    assert json.loads(capsys.readouterr().out)["withheld"] == 1
