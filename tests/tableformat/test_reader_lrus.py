"""The readers' bounded caches of footers and open files: least recently used first out, and an open
file that leaves the cache is closed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from seqlake.tableformat.io import FooterCache, OpenFiles


def test_footer_cache_keeps_the_most_recently_used(tmp_path):
    meta = {}
    for name in "abc":
        pq.write_table(pa.table({"x": [1]}), tmp_path / f"{name}.parquet")
        meta[name] = pq.read_metadata(tmp_path / f"{name}.parquet")
    cache = FooterCache(capacity=2)
    cache.put("a", meta["a"])
    cache.put("b", meta["b"])
    assert cache.get("a") is meta["a"]  # a is now newer than b
    cache.put("c", meta["c"])
    assert cache.get("b") is None and cache.get("a") is meta["a"] and cache.get("c") is meta["c"]
    assert (cache.hits, cache.misses) == (3, 1)


def test_open_files_reuse_a_returned_file_and_close_evicted_ones(tmp_path):
    fs = pafs.LocalFileSystem()
    paths = []
    for name in "abc":
        path = str(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table({"x": [1, 2, 3]}), path)
        paths.append(path)
    files = OpenFiles(capacity=2, per_file=1)
    opened = {}
    for path in paths[:2]:
        opened[path] = files.take(fs, path, pq.read_metadata(path))
        files.give_back(path, opened[path])
    assert files.take(fs, paths[0], pq.read_metadata(paths[0])) is opened[paths[0]]  # reused, and newest
    files.give_back(paths[0], opened[paths[0]])
    third = files.take(fs, paths[2], pq.read_metadata(paths[2]))
    files.give_back(paths[2], third)  # over capacity: b, the least recently used, is closed
    assert opened[paths[1]][0].closed and not opened[paths[0]][0].closed and not third[0].closed
    spare = files.take(fs, paths[2], pq.read_metadata(paths[2]))
    second = files.take(fs, paths[2], pq.read_metadata(paths[2]))  # none idle: a new pair
    assert spare is third and second is not third
    files.give_back(paths[2], spare)
    files.give_back(paths[2], second)  # more than per_file: closed at once
    assert second[0].closed and not spare[0].closed
    files.clear()
    assert opened[paths[0]][0].closed and spare[0].closed
