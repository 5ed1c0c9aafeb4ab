"""Data files written one bucket at a time: each lands in its bucket's partition, nothing shows
before the commit, and the commit replaces what it replaces in one step."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.expressions import AlwaysTrue

from seqlake.core.config import DEFAULT_CONFIG_PATH, parse_config
from seqlake.core.errors import SeqlakeError
from seqlake.pipelines.training.rebuild.bucket_files import BucketFiles
from seqlake.pipelines.training.tables import create_bucketed_table
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.forgets import ReadPoint

SCHEMA = pa.schema([pa.field("user_id", pa.int64(), nullable=False), pa.field("seq", pa.list_(pa.int32()))])


@pytest.fixture
def table(tmp_path):
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["warehouse"] = {**data["warehouse"], "path": str(tmp_path / "warehouse"), "catalog_uri": None}
    config = parse_config(data, "test")
    return config, create_bucketed_table(config, "bucketed", SCHEMA)


def rows_of(users: list[int]) -> pa.Table:
    return pa.table({"user_id": users, "seq": [[u % 7, u % 5] for u in users]}, schema=SCHEMA)


def test_each_bucket_becomes_one_file_of_its_partition_and_the_commit_replaces(table):
    config, bucketed = table
    users = np.arange(1, 200, dtype=np.int64)
    buckets = bucket_of(users, config.layout.bucket_count)
    bucketed.append(rows_of([5, 6]))  # what the commit replaces
    files = BucketFiles(bucketed, config.layout.bucket_count)
    for bucket in (0, 3):
        files.write(rows_of(users[buckets == bucket].tolist()))
    files.write(rows_of([]))  # nothing to write: no file
    bucketed.refresh()
    assert sorted(bucketed.scan().to_arrow()["user_id"].to_pylist()) == [5, 6]  # not visible yet
    files.commit(ReadPoint(), replacing=AlwaysTrue())
    bucketed.refresh()
    tasks = list(bucketed.scan().plan_files())
    assert sorted(t.file.partition[0] for t in tasks) == [0, 3]
    for task in tasks:
        assert task.file.record_count == int(np.sum(buckets == task.file.partition[0]))
        held = pq.read_table(task.file.file_path.removeprefix("file://"))
        assert set(bucket_of(held["user_id"], config.layout.bucket_count).tolist()) == {task.file.partition[0]}
    expected = sorted(users[(buckets == 0) | (buckets == 3)].tolist())
    assert sorted(bucketed.scan().to_arrow()["user_id"].to_pylist()) == expected


def test_rows_of_two_buckets_are_refused(table):
    config, bucketed = table
    users = np.arange(1, 50, dtype=np.int64)
    buckets = bucket_of(users, config.layout.bucket_count)
    mixed = [int(users[buckets == 0][0]), int(users[buckets == 1][0])]
    with pytest.raises(SeqlakeError, match="buckets"):
        BucketFiles(bucketed, config.layout.bucket_count).write(rows_of(mixed))
