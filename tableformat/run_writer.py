"""Write one sorted run: a stream ordered by (bucket, key) becomes one history file per bucket."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa

from seqlake.core.errors import SeqlakeError, UnsortedInputError
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.layout import DEFAULT_POLICY, LayoutPolicy
from seqlake.tableformat.writer import HistoryFileWriter, WrittenFile

RUN_ID = re.compile(r"^[a-z0-9]{1,40}$")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise SeqlakeError(f"run id {run_id!r} must be 1-40 lowercase letters or digits")
    return run_id


def write_run(
    batches: Iterable[pa.RecordBatch],
    *,
    file_uri: Callable[[int], str],
    schema: pa.Schema,
    run_id: str,
    bucket_count: int,
    group_order: Sequence[str],
    policy: LayoutPolicy = DEFAULT_POLICY,
) -> list[WrittenFile]:
    """Write batches ordered by (bucket of user_id, user_id, feature_group, event_ts, lsn).

    A new file starts whenever the bucket changes; a bucket seen again later is an ordering error.
    On any error the files written so far are deleted and the error is raised.
    """
    check_run_id(run_id)
    written: list[WrittenFile] = []
    writer: HistoryFileWriter | None = None
    done: set[int] = set()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            buckets = bucket_of(batch.column("user_id"), bucket_count)
            cuts = np.flatnonzero(np.diff(buckets)) + 1
            for start, end in zip(np.r_[0, cuts], np.r_[cuts, len(buckets)], strict=True):
                bucket = int(buckets[start])
                if writer is None or writer.bucket != bucket:
                    if writer is not None:
                        written.append(writer.close())
                        done.add(writer.bucket)
                    if bucket in done:
                        raise UnsortedInputError(f"bucket {bucket} appears twice: input is not bucket-ordered")
                    writer = HistoryFileWriter(
                        file_uri(bucket),
                        schema,
                        run_id=run_id,
                        bucket=bucket,
                        group_order=group_order,
                        policy=policy,
                    )
                writer.write(batch.slice(start, end - start))
        if writer is not None:
            written.append(writer.close())
            writer = None
    except BaseException:
        if writer is not None:
            writer.abort()
        for item in written:
            _delete(item.uri)
        raise
    return written


def _delete(uri: str) -> None:
    fs, path = resolve_uri(uri)
    fs.delete_file(path)
