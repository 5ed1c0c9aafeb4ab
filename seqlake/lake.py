"""The front door in Python: `seqlake.open()` gives a `Lake`, one object for reads, SQL, captures and samples.

Each method is a thin wrapper over the function that does the work (named in its docstring), so what
the command line does and what a training job calls are the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from seqlake.core.config import Config, load_config
from seqlake.core.errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyiceberg.table import Table

    from seqlake.pipelines.maintenance.steps import StepReport
    from seqlake.pipelines.training.backfill.plan import Backfill, BackfillResult
    from seqlake.pipelines.training.capture.append import CapturesWritten
    from seqlake.pipelines.training.capture.pointers import Capture, Request
    from seqlake.pipelines.training.rebuild.samples import ReconstructionResult
    from seqlake.pipelines.training.rebuild.stream import SampleStream
    from seqlake.pipelines.training.sequence import Tenant
    from seqlake.sql_session import SqlSession
    from seqlake.tableformat.reader import HistoryReader, Selection
    from seqlake.tableformat.time_travel import AsOf

HISTORY_TABLE = "history"


def open(config: Config | str | Path | None = None) -> Lake:  # noqa: A001 - seqlake.open, as in io.open
    """Open the warehouse a configuration describes.

    Parameters:
        config: a loaded `Config`, the path of a configuration YAML, or None for the usual lookup
            ($SEQLAKE_CONFIG, then ./seqlake.yaml, then the packaged default).

    Raises:
        ConfigError: the configuration cannot be read or is invalid (the message names the key).
    """
    return Lake(config if isinstance(config, Config) else load_config(config))


class Lake:
    """One warehouse: its history tables, the online view, the SQL session and the training tables.

    A Lake reads each table at the snapshot current when it first reads it (repeatable reads, and the
    footers it has read stay cached); `refresh()` moves to the newest snapshots. Close it, or use it in
    a `with` block, to release the SQL session.
    """

    def __init__(self, config: Config) -> None:
        from seqlake.tableformat.cache import FooterCache

        self.config = config
        self._footers = FooterCache()
        self._readers: dict[str, HistoryReader] = {}
        self._session: SqlSession | None = None

    def __repr__(self) -> str:
        return f"Lake({self.config.warehouse_uri()!r})"

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the SQL session (if one was opened); the Lake can still be used afterwards."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def refresh(self) -> None:
        """Read the newest snapshots from now on (tables and SQL views)."""
        self._readers.clear()
        self.close()

    # -- reads ---------------------------------------------------------------------------------------

    def history(
        self,
        user_id: int,
        selection: Selection | None = None,
        *,
        feature_groups: Iterable[str] | None = None,
        columns: Iterable[str] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        as_of: AsOf | None = None,
        top_k: int | None = None,
        newest_first: bool | None = None,
        fresh: bool = False,
        table: str = HISTORY_TABLE,
    ) -> pa.Table:
        """One user's history as Arrow, in sequence order (`HistoryReader.read_user`).

        Parameters:
            user_id: the user.
            selection: a `Selection`; the keyword options below override its fields.
            feature_groups, columns: what to read (default: all); selections are pushed down to storage.
            start, end: event-time range, `start` inclusive, `end` exclusive (time-zone aware). Rows
                are stamped with their earliest event; with `end`, a row that also merged events
                from `end` on comes back rebuilt from the detail events before `end`
                (`seqlake.pipelines.reads.bounded`), or, where that window's detail has expired,
                is withheld: a `WithheldRowsWarning` says how many (`withheld_rows(table)` too).
            as_of: only what was known then (`seqlake.tableformat.time_travel`): a `Frontier`
                (or a {source partition: LSN} mapping: the rows at or below their partition's LSN),
                a snapshot id of the table (the frontier it had then), or an arrival time (a
                time-zone aware datetime: the frontier of the publications current then).
            top_k: only the newest K rows; newest_first: newest row first.
            fresh: add the rows landed since the last publication (`seqlake.pipelines.reads.fresh.fresh_history`),
                aggregated as their window will publish them.
            table: the history table (default: history).

        Raises:
            SchemaError: an unknown table, feature group, column or snapshot (or one whose frontier
                has expired); SetupError: no warehouse there.
        """
        reader = self._reader(table)
        chosen = self._selection(reader, selection, feature_groups, columns, start, end, as_of, top_k, newest_first)
        if fresh:
            from seqlake.pipelines.landing.tables import landing_paths
            from seqlake.pipelines.reads.fresh import fresh_history

            rows = fresh_history(reader, self.config, landing_paths(self.config), user_id, chosen)
            self._warn_withheld(chosen, rows)
            return rows
        if chosen.end is None:  # a point lookup: straight to storage
            return reader.read_user(user_id, selection=chosen)
        return self._bounded(reader, [user_id], chosen, 1)[int(user_id)]

    def histories(
        self,
        user_ids: Iterable[int],
        selection: Selection | None = None,
        *,
        feature_groups: Iterable[str] | None = None,
        columns: Iterable[str] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        as_of: AsOf | None = None,
        top_k: int | None = None,
        newest_first: bool | None = None,
        max_workers: int = 4,
        table: str = HISTORY_TABLE,
    ) -> dict[int, pa.Table]:
        """Many users' histories, one read per data file for all of them (`seqlake.tableformat.multi_reader.histories`).

        Parameters are those of `history` (without `fresh`), and `max_workers`, the files read in
        parallel. Returns {user id: Arrow table} in the order first given; a user without rows maps to
        an empty table.

        Raises:
            SchemaError: an unknown table, feature group or column; SetupError: no warehouse there.
        """
        from seqlake.tableformat.multi_reader import histories

        reader = self._reader(table)
        chosen = self._selection(reader, selection, feature_groups, columns, start, end, as_of, top_k, newest_first)
        if chosen.end is None:
            return histories(reader, user_ids, chosen, max_workers=max_workers)
        return self._bounded(reader, user_ids, chosen, max_workers)

    def sql(self, query: str, *, params: dict[str, object] | None = None) -> pd.DataFrame:
        """Run one read-only DuckDB query over the warehouse, seqlake's views and macros loaded (sql/).

        Parameters:
            query: the SQL; write `$name` for a value and pass it in `params` (never into the text).
            params: {name: value} bound to `$name`.

        Returns the result as a pandas DataFrame (`seqlake.sql_session.SqlSession.query`). Every table's
        view (history, detail, raw, training, samples, backfills, quarantines, landing) reads the
        snapshot current when the session opened, every page and file verified (`Lake.table`).

        Raises:
            SqlError: DuckDB rejected the statement, it would write, or it reads a damaged or
                replaced file of any table (the message names it); SetupError: no warehouse there.
        """
        return self._sql_session().query(query, **(params or {}))

    def table(self, name: str, *, columns: list[str] | None = None) -> pa.Table:
        """Every row of one of the warehouse's tables as Arrow: history, history_detail, raw_events,
        training_<tenant>, samples_<tenant>, backfill_<tenant>, the quarantines, landing_events.

        The rows are read through the table's verified view in the SQL session (`Lake.sql`): every
        page's CRC checked as it is decoded, every file's size and row count its Iceberg manifest's or
        Delta log's, history's footers their layout digest. It reads the snapshot current when the
        session opened.

        Raises:
            SqlError: no such table, an unknown column, or a damaged or replaced file (the message
                names the file and `seqlake fsck`); SetupError: no warehouse there.
        """
        return self._sql_session().table(name, columns)

    def _sql_session(self) -> SqlSession:
        if self._session is None:
            from seqlake.sql_session import open_session

            self._check_warehouse()
            self._session = open_session(self.config, quiet=True)
        return self._session

    # -- training ------------------------------------------------------------------------------------

    def tenant(self, name: str) -> Tenant:
        """The configured tenant (a model's read profile: feature groups, columns, max length).

        Raises:
            SchemaError: no tenant of that name in the configuration.
        """
        from seqlake.pipelines.training.sequence import Tenant

        if name not in self.config.tenants:
            raise SchemaError(f"no tenant {name!r} in the configuration (tenants: {', '.join(self.config.tenants)})")
        return Tenant(self.config, name)

    def capture(
        self,
        requests: Iterable[Request],
        *,
        tenant: str | Tenant,
        fragment_events: int | None = None,
        replay: bool = False,
    ) -> list[Capture]:
        """Capture inference requests against the online view now (`capture.past.capture_now`).

        Each capture holds the model input (`sequence`), the `pointer` that rebuilds it later (range,
        LSN bound per source partition, open window, length, Top-K, checksum) and the newest
        `fragment_events` rows (`fragment`). Live requests are captured; past ones are backfilled.

        Parameters:
            requests: the requests (`seqlake.Request`).
            tenant: the tenant's name or `Tenant`.
            fragment_events: W, the rows kept in the training row (default: training.fragment_events).
            replay: take requests in the past too (a live log replayed in real time); their pointers
                record `replayed` True (False for every live request).

        Raises:
            SchemaError: an unknown tenant, or a table missing; SetupError: no warehouse there;
            PastRequestError: requests older than what the view holds of their users, or than its
            newest arrival by more than training.capture_tolerance_seconds (`capture.past`).
        """
        from seqlake.pipelines.landing.tables import landing_paths
        from seqlake.pipelines.tables import DETAIL, load_existing_table
        from seqlake.pipelines.training.capture.online_view import ViewSnapshot
        from seqlake.pipelines.training.capture.past import capture_now
        from seqlake.pipelines.training.capture.pointers import captures_of
        from seqlake.tableformat.reader import HistoryReader

        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        width = self.config.training.fragment_events if fragment_events is None else fragment_events
        history = self._table(HISTORY_TABLE)  # the newest snapshot: captures see what serving sees
        detail = load_existing_table(self.config, DETAIL)
        with ViewSnapshot(self.config, history, detail, landing_paths(self.config)) as view:
            reader = HistoryReader(history, footer_cache=self._footers)
            asked = list(requests)
            tolerance = self.config.training.capture_tolerance_seconds
            batch = capture_now(view, reader, profile, asked, width, tolerance, replay)
            return captures_of(batch, profile, asked)

    def write_captures(
        self,
        requests: Iterable[Request],
        *,
        tenant: str | Tenant,
        fragment_events: int | None = None,
        replay: bool = False,
    ) -> CapturesWritten:
        """Capture requests against the online view now and append their training rows (request,
        pointer, fragment) to training_<tenant>, created when needed: what `seqlake capture` does, and
        what `samples` rebuilds from. Request ids the table holds already are left out. Parameters
        and errors as `capture`'s; the answer counts what was appended, what was held already and
        the past requests replayed.
        """
        from seqlake.pipelines.training.capture.append import write_captures
        from seqlake.pipelines.training.capture.pointers import request_table

        self._table(HISTORY_TABLE)  # no warehouse or no history: say so before a training table is made
        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return write_captures(self.config, profile, request_table(list(requests)), fragment_events, replay)

    def samples(
        self, tenant: str | Tenant, *, mode: Literal["lsn", "time"] = "lsn", compare: bool = True
    ) -> ReconstructionResult:
        """Rebuild a tenant's training samples from their pointers, verified by checksum, in-process
        (`seqlake.pipelines.training.rebuild.samples.write_arrow_samples`).

        LSN mode replaces the table samples_<tenant> (and this tenant's rows of the quarantine table);
        time mode replays by event time only and writes no table.

        Parameters:
            tenant: the tenant's name or `Tenant`.
            mode: "lsn" (exact) or "time" (event time alone, for comparison).
            compare: compare every sample with its fat row (`matched` in the result; False: 0).

        Raises:
            SchemaError: an unknown tenant, or its training table does not exist.
        """
        from seqlake.pipelines.training.rebuild.samples import write_arrow_samples

        self._check_warehouse()
        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return write_arrow_samples(self.config, profile, mode, compare=compare)

    def sample_batches(
        self, tenant: str | Tenant, *, mode: Literal["lsn", "time"] = "lsn", batch_rows: int = 2048
    ) -> SampleStream:
        """The tenant's verified training samples as a stream of Arrow record batches, nothing written:
        what a trainer reads (`seqlake.pipelines.training.rebuild.stream.SampleStream`). Each sequence's
        checksum is checked as its batch is rebuilt; a sample that fails is left out, kept in
        `stream.quarantined`, and counted by a `QuarantinedSamplesWarning` when the stream ends.
        `stream.numpy_batches()` yields the batches as dicts of NumPy arrays (tf.data, PyTorch).

        Raises:
            SchemaError: an unknown tenant, or its training table does not exist.
        """
        from seqlake.pipelines.training.rebuild.stream import SampleStream

        self._check_warehouse()
        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return SampleStream(self.config, profile, mode, batch_rows=batch_rows)

    def backfill(
        self,
        labels: str | Path | pa.Table,
        tenant: str | Tenant,
        *,
        as_of: Literal["event-time", "arrival"] = "event-time",
        out: str | None = None,
        ts_column: str = "ts",
        inclusive: bool = False,
    ) -> BackfillResult:
        """Each label row (user_id, ts, other columns kept) with the tenant's sequence as it stood just
        before ts, written to the Iceberg table `out` (default backfill_<tenant>, replaced; bucketed
        like history) (`seqlake.pipelines.training.backfill.plan.write_backfill`). The result holds the
        leakage report (`result.leakage`: sequence rows known only after their label's ts, by kind).

        Parameters:
            labels: an Arrow table, an Iceberg table's name, a Delta folder, a Parquet or CSV file.
            tenant: the tenant's name or `Tenant` (feature groups, columns, length).
            as_of: "event-time" (the events with event time < ts) or "arrival" (only what had
                arrived before ts).
            out: the output table's name.
            ts_column: the label time column.
            inclusive: arrival only: what arrived at ts counts too (labels that are not events).

        Raises:
            SchemaError: the labels lack user_id or the time column, or a value does not convert.
        """
        from seqlake.pipelines.training.backfill.plan import write_backfill

        self._check_warehouse()
        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return write_backfill(self.config, labels, profile, as_of, out, ts_column=ts_column, inclusive=inclusive)

    def backfill_batches(
        self,
        labels: str | Path | pa.Table,
        tenant: str | Tenant,
        *,
        as_of: Literal["event-time", "arrival"] = "event-time",
        ts_column: str = "ts",
        inclusive: bool = False,
    ) -> Backfill:
        """The same backfill as a stream, nothing written: iterate `job` (Arrow tables of label rows
        with their `seq_` list columns, bucket by bucket); `job.leakage` is complete once it is
        consumed; `with` closes it (or `job.close()`)."""
        from seqlake.pipelines.training.backfill.plan import Backfill

        self._check_warehouse()
        profile = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return Backfill(self.config, labels, profile, as_of, ts_column=ts_column, inclusive=inclusive)

    # -- deletion ------------------------------------------------------------------------------------

    def forget(self, user_ids: Iterable[int], *, spark=None) -> list[StepReport]:
        """Remove every row of the users from the landing tier, the history table and every table holding
        a `user_id`, one commit per table, which also records the forget so that no job that read before
        it brings their rows back (`seqlake.pipelines.forget.remove.forget_users`). The landing tier is
        changed in-process (delta-rs), or by Delta's own writer with a Spark session. Returns one report
        per table (rows removed); the bytes are gone once `maintain` expires the snapshots from before it
        and removes the orphan files.

        Raises:
            UsersRemain: a table still holds a row of theirs afterwards; SetupError: no warehouse there.
        """
        from seqlake.pipelines.forget.remove import forget_users
        from seqlake.pipelines.landing.tables import LandingTier, landing_paths

        self._check_warehouse()
        reports = forget_users(self.config, list(user_ids), landing=LandingTier(landing_paths(self.config), spark))
        self.refresh()
        return reports

    # -- tables --------------------------------------------------------------------------------------

    def _check_warehouse(self) -> None:
        from seqlake.engines.catalog import check_warehouse

        check_warehouse(self.config)

    def _table(self, name: str) -> Table:
        from seqlake.pipelines.tables import load_history_table

        self._check_warehouse()
        return load_history_table(self.config, name)

    def _reader(self, name: str) -> HistoryReader:
        if name not in self._readers:
            from seqlake.tableformat.reader import HistoryReader

            self._readers[name] = HistoryReader(self._table(name), footer_cache=self._footers)
        return self._readers[name]

    def _bounded(
        self, reader: HistoryReader, user_ids: Iterable[int], chosen: Selection, max_workers: int
    ) -> dict[int, pa.Table]:
        """A time-range read (`seqlake.pipelines.reads.bounded.bounded_read`): rows with events from
        `end` on rebuilt as of `end`, or withheld (a `WithheldRowsWarning`) where detail expired."""
        from seqlake.pipelines.reads.bounded import bounded_read, lake_detail

        found = bounded_read(self.config, reader, user_ids, chosen, lake_detail(self.config, reader), max_workers)
        if found.total_withheld:
            self._warn_withheld(chosen, None, found.total_withheld)
        return found.rows

    @staticmethod
    def _warn_withheld(chosen: Selection, rows: pa.Table | None, count: int | None = None) -> None:
        import warnings

        from seqlake.pipelines.reads.bounded import WithheldRowsWarning, withheld_rows

        count = withheld_rows(rows) if count is None and rows is not None else count
        if count and chosen.end is not None:
            warnings.warn(WithheldRowsWarning(count, chosen.end), stacklevel=4)

    def _selection(
        self,
        reader: HistoryReader,
        selection: Selection | None,
        feature_groups: Iterable[str] | None,
        columns: Iterable[str] | None,
        start: datetime | None,
        end: datetime | None,
        as_of: AsOf | None,
        top_k: int | None,
        newest_first: bool | None,
    ) -> Selection:
        """`selection` (default: everything) with the options given (not None) in place of its fields;
        `as_of` resolved to a frontier against the reader's table."""
        from seqlake.tableformat.reader import Selection
        from seqlake.tableformat.time_travel import frontier_as_of

        given: dict[str, Any] = {
            "feature_groups": tuple(feature_groups) if feature_groups is not None else None,
            "columns": tuple(columns) if columns is not None else None,
            "start": start,
            "end": end,
            "as_of": None if as_of is None else frontier_as_of(reader.table, as_of, self.config.layout.window_seconds),
            "top_k": top_k,
            "newest_first": newest_first,
        }
        return replace(selection or Selection(), **{k: v for k, v in given.items() if v is not None})
