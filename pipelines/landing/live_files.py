"""The landing tier's live files as its Delta log records them, for verified reads and fsck.

The log's add actions record each file's size and row count (`numRecords`); `seqlake sql` checks both
against the file when its view opens, and `seqlake fsck` reads every page with its CRC verified
(`seqlake.tableformat.verified_scan.LiveFile`).
"""

from __future__ import annotations

from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds

from seqlake.pipelines.landing.delta_writer import open_table
from seqlake.tableformat.verified_scan import LiveFile


def delta_live_files(location: str) -> tuple[pa.Schema, list[LiveFile]] | None:
    """The current version's schema and files (size, rows, partition values) of the Delta table at
    `location`; None if there is none."""
    table = open_table(location)
    if table is None:
        return None
    dataset: ds.FileSystemDataset = table.to_pyarrow_dataset()  # the log's files with their partition values
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions["path"].to_pylist()
    counts = dict(zip(paths, actions["num_records"].to_pylist(), strict=True))
    sizes = dict(zip(paths, actions["size_bytes"].to_pylist(), strict=True))
    root = location.rstrip("/")
    files = [
        LiveFile(
            f"{root}/{unquote(fragment.path)}",
            sizes[fragment.path],
            rows=counts.get(fragment.path),
            seqlake_file=False,
            partition=fragment.partition_expression,
        )
        for fragment in dataset.get_fragments()
    ]
    return dataset.schema, files
