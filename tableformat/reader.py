"""Read one user's history from the history table: Iceberg prunes to one file per sorted run, Parquet
row-group statistics to the row groups holding the user, projection to the columns asked for."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from seqlake.errors import SchemaError
from tableformat.io import FooterCache, PlainFileSystem, read_footer
from tableformat.schema import KEY_COLUMNS


class HistoryReader:
    def __init__(self, table: Table, filesystem=None, footer_cache: FooterCache | None = None) -> None:
        self.table = table
        self.fs = filesystem or PlainFileSystem()
        self.footers = footer_cache if footer_cache is not None else FooterCache()
        self.columns = [f.name for f in table.schema().fields]

    def files_for_user(self, user_id: int) -> list[str]:
        """Data files that may hold the user: bucket partition and user_id bounds prune the rest."""
        scan = self.table.scan(row_filter=EqualTo("user_id", int(user_id)))
        return [task.file.file_path for task in scan.plan_files()]

    def read_user(self, user_id: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The user's rows, key-ordered, with the key columns plus `columns` (default: all)."""
        wanted = list(columns) if columns is not None else self.columns
        unknown = [c for c in wanted if c not in self.columns]
        if unknown:
            raise SchemaError(f"unknown columns {unknown}; the history table has {self.columns}")
        parts = [self.read_user_in_file(uri, int(user_id), wanted) for uri in self.files_for_user(user_id)]
        parts = [p for p in parts if p.num_rows]
        if not parts:
            schema = self.table.schema().as_arrow()
            return schema.empty_table().select(list(dict.fromkeys(wanted)))
        result = pa.concat_tables(parts)
        if len(parts) > 1:
            result = result.sort_by([(k, "ascending") for k in KEY_COLUMNS if k in result.column_names])
        return result

    def read_user_in_file(self, uri: str, user_id: int, wanted: list[str]) -> pa.Table:
        """The user's rows in one data file."""
        return read_user_from_file(self.fs, self.footers, uri, user_id, wanted)


def read_user_from_file(fs, footers: FooterCache, uri: str, user_id: int, columns: list[str]) -> pa.Table:
    """One user's rows in one history file: footer (cached), row groups chosen by user_id statistics,
    a projected read, and a filter only when a chosen row group is shared with other users."""
    columns = list(dict.fromkeys(columns))
    with fs.open_input_file(uri) as handle:
        meta = footers.get(uri)
        if meta is None:
            meta = read_footer(handle)
            footers.put(uri, meta)
        parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=False)
        user_col = parquet.schema_arrow.get_field_index("user_id")
        groups, shared = [], False
        for rg in range(meta.num_row_groups):
            stats = meta.row_group(rg).column(user_col).statistics
            if stats is None or not stats.has_min_max:
                groups.append(rg)
                shared = True
            elif stats.min <= user_id <= stats.max:
                groups.append(rg)
                shared = shared or stats.min != stats.max
        if not groups:
            return pa.table({c: pa.array([], parquet.schema_arrow.field(c).type) for c in columns})
        # Row groups that hold only this user need no user_id column to filter on.
        read_cols = list(dict.fromkeys(columns + (["user_id"] if shared else [])))
        table = parquet.read_row_groups(groups, columns=read_cols)
    if shared:
        table = table.filter(pc.equal(table["user_id"], user_id))
    return table.select(columns)
