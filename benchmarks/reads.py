"""Measure multi-user reads and the history cache side by side, as ratios.

Builds a history table in a temporary warehouse (a few thousand users, heavy-tailed history lengths,
several sorted runs so that active users live in more than one run), then measures in one run:

  multi-user   `histories(reader, 256 users)` against 256 × `reader.read_user`: wall-time ratio,
               and opens, read calls and bytes counted through CountingFileSystem;
  verification the same 256 `read_user` lookups with page checksums and footer digests checked (as
               every seqlake read is) and without (`seqlake.tableformat.io.unverified_reads`): wall-time
               ratio, printed and not asserted;
  SQL          the same queries (a grouped scan of the whole table; point lookups of the 256 users)
               through `seqlake sql`'s history view, which verifies every page and footer
               (`seqlake.tableformat.verified_scan`), and through plain DuckDB (`iceberg_scan`, nothing
               verified): wall-time ratio of each, and of opening the session, printed;
  cache        a Zipf-skewed lookup workload (a serving tenant's selection) through `HistoryReader`
               and through `CachedHistoryReader` at each cache bound: hit rate, speed-up ratio. A
               bound of 0 caches no chunk, so its row shows what the per-snapshot file index alone
               gives and the others what the decoded chunks add.

Every result of the fast path is compared with the plain per-user read; a difference is reported as
a failed check. Bytes, reads and opens are counted exactly; times are wall clock on a possibly shared
machine (multi-user: the median of interleaved repeats): compare the ratios, never the absolute times.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from benchmarks.shapes import RealisticValues
from benchmarks.synthetic import (
    history_lengths,
    increasing_per_user,
    pick_groups,
    publish_synthetic_run,
    synthetic_rows,
)
from seqlake.core.config import Config, load_config
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.tableformat.cache import CachedHistoryReader, HistoryCache
from seqlake.tableformat.io import CountingFileSystem, FooterCache, IOStats, PlainFileSystem, unverified_reads
from seqlake.tableformat.layout import DEFAULT_POLICY
from seqlake.tableformat.multi_reader import histories
from seqlake.tableformat.reader import HistoryReader, Selection
from seqlake.tableformat.registry import create_history_table

NAMESPACE = "bench_reads"
TABLE = "history"
FIRST_USER = 1_000_000
WRITE_BATCH_ROWS = 8192


# -- data ----------------------------------------------------------------------------------------


def user_ids_and_lengths(users: int, heavy_users: int, heavy_rows: int, min_events: int, alpha: float, seed: int):
    """(user ids, rows per user): Pareto lengths capped at `heavy_rows`, `heavy_users` users at that."""
    rng = np.random.default_rng(seed)
    lengths = history_lengths(users, heavy_users, heavy_rows, min_events, alpha, rng)
    ids = FIRST_USER + np.cumsum(rng.integers(1, 20, users))
    return ids.astype(np.int64), lengths


def run_rows(
    config: Config, user_ids: np.ndarray, lengths: np.ndarray, run: int, seed: int, shape: str = "realistic"
) -> pa.Table:
    """One sorted run's rows for `user_ids` (`lengths` rows each), ordered by (bucket, key), with
    values of the `shape` (`benchmarks.shapes`). Run `run` covers later event times and higher LSNs
    than run `run - 1`."""
    keep = lengths > 0
    user_ids, lengths = user_ids[keep], lengths[keep]
    rng = np.random.default_rng([seed, run])
    n = int(lengths.sum())
    # Per user, event times advance 1-60 s a row from the run's start; LSNs follow event time.
    elapsed = increasing_per_user(lengths, rng, 1_000_000, 60_000_000)
    run_start = int(config.generator.start_ts.timestamp()) * 1_000_000 + run * 30 * 86_400_000_000
    lsn = run * 10**12 + elapsed // 1000 + rng.integers(0, 1000, n)
    user_id = np.repeat(user_ids, lengths)
    return synthetic_rows(
        config,
        user_id=user_id,
        feature_group=pick_groups(config, n, rng),
        event_ts_us=run_start + elapsed,
        lsn=lsn,
        min_lsn=lsn - rng.integers(0, 50, n),
        event_count=rng.integers(1, 4, n),
        values=RealisticValues(user_id, rng) if shape == "realistic" else None,
        rng=rng,
    )


def build_table(
    config: Config,
    users: int,
    heavy_users: int,
    heavy_rows: int,
    runs: int,
    seed: int,
    policy=DEFAULT_POLICY,
    shape: str = "realistic",
):
    """Create the history table in `config`'s warehouse and publish `runs` sorted runs: the first holds
    every user's history, each later one a shrinking random share of the users (the active ones) with
    short increments. Returns (table, user ids, total rows per user)."""
    gen = config.generator
    user_ids, lengths = user_ids_and_lengths(users, heavy_users, heavy_rows, gen.min_events, gen.length_alpha, seed)
    table = create_history_table(open_catalog(config), table_identifier(config, TABLE), config, replace=True)
    rng = np.random.default_rng([seed, 99])
    totals = np.zeros(len(user_ids), np.int64)
    for run in range(runs):
        if run == 0:
            run_lengths = lengths
        else:
            active = rng.random(len(user_ids)) < 0.5 / run
            run_lengths = np.where(active, np.maximum(1, lengths // (4 * run)), 0)
        totals += run_lengths
        data = run_rows(config, user_ids, run_lengths, run, seed, shape)
        run_id = f"w{run + 1}"
        publish_synthetic_run(table, config, data, run_id, [run + 1], batch_rows=WRITE_BATCH_ROWS, policy=policy)
    return table, user_ids, totals


# -- workloads -----------------------------------------------------------------------------------


def selections(config: Config) -> dict[str, Selection]:
    """The selections measured: whole histories, and each tenant's read profile (its feature groups and
    columns, the newest `max_length` events, newest first)."""
    out = {"all columns": Selection()}
    for name, tenant in config.tenants.items():
        out[f"tenant {name}"] = Selection(
            feature_groups=tuple(tenant.feature_groups),
            columns=tuple(config.tenant_columns(name)),
            top_k=tenant.max_length,
            newest_first=True,
        )
    return out


def zipf_lookups(user_ids: np.ndarray, lookups: int, s: float, seed: int) -> list[int]:
    """`lookups` user ids drawn with P(rank r) ~ r^-s over all users, ranks assigned in random order."""
    rng = np.random.default_rng([seed, 7])
    weights = 1.0 / np.arange(1, len(user_ids) + 1) ** s
    ranked = rng.permutation(user_ids)
    return ranked[rng.choice(len(user_ids), lookups, p=weights / weights.sum())].tolist()


def identical(a: pa.Table, b: pa.Table) -> bool:
    """Same rows in the same order, same columns, same types and metadata."""
    return a.schema.equals(b.schema, check_metadata=True) and a.equals(b)


T = TypeVar("T")


def _timed(action: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def _io(stats: IOStats) -> dict[str, int]:
    return {"opens": stats.opens, "reads": stats.reads, "bytes": stats.bytes_read}


@dataclass
class ReadBench:
    data: str  # the data's shape (benchmarks.shapes)
    users: int
    rows: int
    files: int
    runs: int
    longest: int
    multi: list[dict] = field(default_factory=list)  # one per selection
    cache: list[dict] = field(default_factory=list)  # one per cache size
    verification: dict = field(default_factory=dict)  # verified against unverified reads
    sql: dict = field(default_factory=dict)  # the verified SQL history view against plain DuckDB
    sql_plain: dict = field(default_factory=dict)  # the same for a table pyiceberg wrote (no seqlake footer)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "data": self.data,
            "users": self.users,
            "rows": self.rows,
            "files": self.files,
            "runs": self.runs,
            "longest": self.longest,
            "multi": self.multi,
            "cache": self.cache,
            "verification": self.verification,
            "sql": self.sql,
            "sql_plain": self.sql_plain,
            "failures": self.failures,
            "ok": self.ok,
        }


def measure_multi(
    table, users: list[int], selection: Selection, repeats: int, max_workers: int
) -> tuple[dict, list[str]]:
    """`histories` against a `read_user` loop over the same users: times (median of interleaved repeats,
    each with a fresh reader, so footers are read cold by both), counted I/O, identical results."""
    failures = []

    def loop(reader: HistoryReader) -> dict[int, pa.Table]:
        return {u: reader.read_user(u, selection=selection) for u in users}

    def multi(reader: HistoryReader) -> dict[int, pa.Table]:
        return histories(reader, users, selection, max_workers=max_workers)

    counted = {}
    for name, action in (("loop", loop), ("multi", multi)):
        fs = CountingFileSystem()
        results = action(HistoryReader(table, fs, FooterCache()))  # also the untimed warm-up
        counted[name] = (_io(fs.stats), results)
    expected = counted["loop"][1]
    if counted["multi"][1].keys() != expected.keys() or not all(
        identical(counted["multi"][1][u], expected[u]) for u in users
    ):
        failures.append("histories() differs from read_user()")
    times: dict[str, list[float]] = {"loop": [], "multi": []}
    for r in range(repeats):
        order = (("loop", loop), ("multi", multi)) if r % 2 == 0 else (("multi", multi), ("loop", loop))
        for name, action in order:
            # mypy infers no type for a lambda with default arguments (here binding the loop variable)
            elapsed, results = _timed(lambda action=action: action(HistoryReader(table, PlainFileSystem())))  # type: ignore[misc]
            times[name].append(elapsed)
            if name == "multi" and not all(identical(results[u], expected[u]) for u in users):
                failures.append("histories() differs from read_user() in a timed run")
    loop_s, multi_s = float(np.median(times["loop"])), float(np.median(times["multi"]))
    loop_io, multi_io = counted["loop"][0], counted["multi"][0]
    row = {
        "users": len(users),
        "found": sum(1 for t in expected.values() if t.num_rows),
        "rows": sum(t.num_rows for t in expected.values()),
        "loop_s": loop_s,
        "multi_s": multi_s,
        "speedup": loop_s / multi_s,
        "loop_io": loop_io,
        "multi_io": multi_io,
        **{f"{k}_ratio": loop_io[k] / max(1, multi_io[k]) for k in ("opens", "reads", "bytes")},
    }
    return row, failures


def measure_verification(table, users: list[int], selection: Selection, repeats: int) -> tuple[dict, list[str]]:
    """The `read_user` loop with verification (pages' CRCs, footers' digests) and without: times as the
    median of interleaved repeats, each with a fresh reader (cold footers), identical results checked."""

    def loop() -> list[pa.Table]:
        reader = HistoryReader(table, PlainFileSystem())
        return [reader.read_user(u, selection=selection) for u in users]

    times: dict[str, list[float]] = {"verified": [], "unverified": []}
    results: dict[str, list[pa.Table]] = {}
    loop()  # warm-up: the operating system's page cache holds the files for both
    for r in range(repeats):
        for name in ("verified", "unverified") if r % 2 == 0 else ("unverified", "verified"):
            if name == "verified":
                elapsed, results[name] = _timed(loop)
            else:
                with unverified_reads():
                    elapsed, results[name] = _timed(loop)
            times[name].append(elapsed)
    same = all(identical(a, b) for a, b in zip(results["verified"], results["unverified"], strict=True))
    verified_s, unverified_s = float(np.median(times["verified"])), float(np.median(times["unverified"]))
    row = {"users": len(users), "verified_s": verified_s, "unverified_s": unverified_s}
    return row | {"cost_ratio": verified_s / unverified_s}, [] if same else ["verified reads differ from unverified"]


SQL_SCAN = "SELECT user_id, count(*) AS n, sum(lsn) AS lsns, max(event_ts) AS newest FROM {} GROUP BY user_id"
SQL_LOOKUP = "SELECT * FROM {} WHERE user_id = $user ORDER BY event_ts, lsn"
PLAIN_COPY = "history_copy"  # the same rows in a table pyiceberg wrote: what detail, training, samples are


def plain_copy(config: Config, table):
    """The history table's rows in an Iceberg table written by pyiceberg (page CRCs, no seqlake footer),
    as the detail, raw, training and samples tables are written."""
    from seqlake.engines.catalog import open_catalog, table_identifier

    rows = table.scan().to_arrow()
    copy = open_catalog(config).create_table(table_identifier(config, PLAIN_COPY), schema=rows.schema)
    copy.append(rows)
    return copy


def measure_sql(config: Config, table, users: list[int], repeats: int, view: str = "history") -> tuple[dict, list[str]]:
    """The same SQL through `seqlake sql`'s verified view of table `view` and through plain DuckDB's
    `iceberg_scan` of the same snapshot: a grouped scan of every row, and one point lookup per user.
    Times are medians of interleaved repeats on warm sessions (the operating system's page cache
    holds the files for both); defining the view (the verified one checks every live file's size,
    row count and, for history, footer digest) is timed on its own. Results are compared."""
    from seqlake.engines.duckdb_session import connect, sql_literal
    from seqlake.sql_session import open_session
    from seqlake.tableformat.schema import history_read_schema, table_arrow_schema
    from seqlake.tableformat.verified_scan import table_scan

    def open_plain():
        con = connect()
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM iceberg_scan({sql_literal(table.metadata_location)})")
        return con

    def open_verified_view():
        """What the verified session adds to `open_plain`: every live file's size and footer checked."""
        con = connect()
        history = view == "history"
        target, loose = history_read_schema(table) if history else table_arrow_schema(table.schema())
        types = {f.type: str(t) for f, t in zip(target, con.from_arrow(target.empty_table()).types, strict=True)}
        scan = table_scan(table, types, target, loose, f"seqlake_{view}", seqlake_files=history)
        for part in scan.parts:
            con.register(part.name, part.data)
        con.execute(f"CREATE VIEW {view} AS {scan.view_sql()}")
        return con

    opened: dict[str, list[float]] = {"verified": [], "plain": []}
    for _ in range(repeats):
        for name, opener in (("verified", open_verified_view), ("plain", open_plain)):
            elapsed, con = _timed(opener)
            opened[name].append(elapsed)
            con.close()
    verified_session, plain = open_session(config, quiet=True), open_plain()
    connections = {"verified": verified_session.con, "plain": plain}

    def scan(con) -> list[tuple]:
        return sorted(con.execute(SQL_SCAN.format(view)).fetchall())

    def lookups(con) -> list[list[tuple]]:
        return [con.execute(SQL_LOOKUP.format(view), {"user": u}).fetchall() for u in users]

    times: dict[str, dict[str, list[float]]] = {q: {"verified": [], "plain": []} for q in ("scan", "lookups")}
    results: dict[str, dict[str, object]] = {q: {} for q in times}
    try:
        for name, con in connections.items():  # warm-up: files in the page cache, footers parsed
            results["scan"][name], results["lookups"][name] = scan(con), lookups(con)
        for r in range(repeats):
            order = ("verified", "plain") if r % 2 == 0 else ("plain", "verified")
            for query, run in (("scan", scan), ("lookups", lookups)):
                for name in order:
                    elapsed, _ = _timed(lambda run=run, con=connections[name]: run(con))  # type: ignore[misc]
                    times[query][name].append(elapsed)
    finally:
        verified_session.close()
        plain.close()
    failures = [
        f"SQL {query} through the verified {view} view differs from plain DuckDB"
        for query in results
        if results[query]["verified"] != results[query]["plain"]
    ]
    row: dict[str, object] = {"users": len(users)}
    for query, by in (*times.items(), ("open", opened)):
        verified_s, plain_s = float(np.median(by["verified"])), float(np.median(by["plain"]))
        row[query] = {"verified_s": verified_s, "plain_s": plain_s, "cost_ratio": verified_s / plain_s}
    return row, failures


def measure_cache(
    table, lookups: list[int], selection: Selection, cache_bytes: Sequence[int]
) -> tuple[list[dict], list[str]]:
    """The lookup workload through a `HistoryReader`, then through a `CachedHistoryReader` per cache
    bound (all starting cold: empty footer cache, empty history cache), with identical results checked
    lookup by lookup. One row per cache bound."""
    plain = HistoryReader(table, PlainFileSystem())
    plain_s, expected = _timed(lambda: [plain.read_user(u, selection=selection) for u in lookups])
    rows, failures = [], []
    for max_bytes in cache_bytes:
        cached = CachedHistoryReader(table, PlainFileSystem(), cache=HistoryCache(max_bytes))
        cached_s, got = _timed(lambda cached=cached: [cached.read_user(u, selection=selection) for u in lookups])  # type: ignore[misc]
        if not all(identical(a, b) for a, b in zip(got, expected, strict=True)):
            failures.append(f"CachedHistoryReader ({max_bytes:,} B) differs from HistoryReader")
        cache = cached.cache
        rows.append(
            {
                "lookups": len(lookups),
                "distinct_users": len(set(lookups)),
                "max_bytes": max_bytes,
                "plain_s": plain_s,
                "cached_s": cached_s,
                "speedup": plain_s / cached_s,
                "hits": cache.hits,
                "misses": cache.misses,
                "hit_rate": cache.hit_rate,
                "bytes": cache.bytes,
                "evictions": cache.evictions,
            }
        )
    return rows, failures


# -- the benchmark -------------------------------------------------------------------------------


def run_read_bench(
    config: Config | None = None,
    *,
    users: int = 3000,
    heavy_users: int = 3,
    heavy_rows: int = 20_000,
    runs: int = 3,
    multi_users: int = 256,
    lookups: int = 2000,
    zipf_s: float = 1.1,
    cache_bytes: Sequence[int] = (64 * 2**20, 4 * 2**20, 0),
    repeats: int = 3,
    max_workers: int = 4,
    seed: int = 1,
    log: Callable[[str], None] | None = None,
    shape: str = "realistic",
) -> ReadBench:
    """Build the table in a temporary warehouse and measure both comparisons (module docstring)."""
    if repeats < 1 or lookups < 1 or not 1 <= multi_users <= users:
        raise ValueError("need repeats >= 1, lookups >= 1 and 1 <= multi_users <= users")
    config = config or load_config()
    say = log or (lambda line: None)
    with tempfile.TemporaryDirectory(prefix="seqlake-read-bench-") as tmp:
        warehouse = config.warehouse.model_copy(
            update={"path": str(Path(tmp) / "warehouse"), "catalog_uri": None, "namespace": NAMESPACE}
        )
        config = config.model_copy(update={"warehouse": warehouse})
        say(f"building {users:,} users in {runs} sorted runs")
        table, user_ids, totals = build_table(config, users, heavy_users, heavy_rows, runs, seed, shape=shape)
        files = list(table.scan().plan_files())
        bench = ReadBench(
            data=shape, users=users, rows=int(totals.sum()), files=len(files), runs=runs, longest=int(totals.max())
        )
        rng = np.random.default_rng([seed, 3])
        # Requested users: mostly stored ones, a few absent ones (ids between stored ones).
        chosen = rng.choice(user_ids, multi_users, replace=False).tolist()
        absent = [u + 1 for u in chosen[: max(1, multi_users // 64)] if u + 1 not in set(user_ids.tolist())]
        chosen[: len(absent)] = absent
        for name, selection in selections(config).items():
            say(f"multi-user: {name}")
            row, failures = measure_multi(table, chosen, selection, repeats, max_workers)
            bench.multi.append({"selection": name, **row})
            bench.failures += failures
        name, selection = next(iter(selections(config).items()))
        say(f"verification: {multi_users} read_user lookups ({name}) with and without")
        row, failures = measure_verification(table, chosen, selection, repeats)
        bench.verification = {"selection": name, **row}
        bench.failures += failures
        say(f"SQL: a grouped scan and {multi_users} point lookups, verified history view against plain DuckDB")
        row, failures = measure_sql(config, table, chosen, repeats)
        bench.sql = row
        bench.failures += failures
        say(f"SQL: the same on {PLAIN_COPY}, the rows in a table pyiceberg wrote (as detail, training, samples)")
        row, failures = measure_sql(config, plain_copy(config, table), chosen, repeats, view=PLAIN_COPY)
        bench.sql_plain = row
        bench.failures += failures
        # The cache workload reads like a serving tenant: the first tenant's profile, if any.
        selection_name, selection = list(selections(config).items())[min(1, len(selections(config)) - 1)]
        say(f"cache: {lookups:,} Zipf lookups ({selection_name}), bounds {list(cache_bytes)} B")
        rows, failures = measure_cache(table, zipf_lookups(user_ids, lookups, zipf_s, seed), selection, cache_bytes)
        bench.cache += [{"selection": selection_name, "zipf_s": zipf_s, **row} for row in rows]
        bench.failures += failures
    return bench


def format_report(bench: ReadBench) -> str:
    """Markdown tables of the measured ratios."""
    lines = [
        f"{bench.data} data: {bench.users:,} users, {bench.rows:,} rows in {bench.runs} sorted runs "
        f"({bench.files} files), "
        f"longest history {bench.longest:,} rows.",
        "",
        "| selection | users (with rows) | read_user loop, s | histories, s | time ratio | opens | reads | "
        "bytes | bytes ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in bench.multi:
        lo, mu = row["loop_io"], row["multi_io"]
        lines.append(
            f"| {row['selection']} | {row['users']} ({row['found']}) | {row['loop_s']:.3f} | {row['multi_s']:.3f} "
            f"| ×{row['speedup']:.1f} | {lo['opens']:,} → {mu['opens']:,} | {lo['reads']:,} → {mu['reads']:,} "
            f"| {lo['bytes'] / 2**20:,.1f} → {mu['bytes'] / 2**20:,.1f} MiB | ×{row['bytes_ratio']:.1f} |"
        )
    if bench.verification:
        v = bench.verification
        lines += [
            "",
            f"Verification ({v['selection']}, {v['users']} read_user lookups, cold footers): "
            f"{v['verified_s']:.3f} s verified (page checksums, footer digests), {v['unverified_s']:.3f} s "
            f"without: cost ×{v['cost_ratio']:.2f}.",
        ]
    for q, what in ((bench.sql, "verified history view"), (bench.sql_plain, f"verified `{PLAIN_COPY}` view")):
        if not q:
            continue
        lines += [
            "",
            f"| SQL through `seqlake sql` ({what}) vs plain DuckDB (`iceberg_scan`) | verified, s | plain, s | cost |",
            "|---|---:|---:|---:|",
        ]
        for key, label in (
            ("scan", "grouped scan of every row"),
            ("lookups", f"{q['users']} point lookups (`WHERE user_id = $user`)"),
            ("open", "defining the view on a new connection (verified: every file's size and footer checked)"),
        ):
            m = q[key]
            lines.append(f"| {label} | {m['verified_s']:.3f} | {m['plain_s']:.3f} | ×{m['cost_ratio']:.2f} |")
    lines += [
        "",
        "| selection | lookups (distinct users) | cache bound | HistoryReader, s | CachedHistoryReader, s | "
        "speed-up | hit rate | cached | evictions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in bench.cache:
        lines.append(
            f"| {row['selection']} | {row['lookups']:,} ({row['distinct_users']:,}), Zipf s={row['zipf_s']} "
            f"| {row['max_bytes'] / 2**20:,.0f} MiB | {row['plain_s']:.2f} | {row['cached_s']:.2f} "
            f"| ×{row['speedup']:.1f} | {row['hit_rate']:.3f} | {row['bytes'] / 2**20:,.1f} MiB "
            f"| {row['evictions']:,} |"
        )
    lines += [
        "",
        "Time ratio and speed-up: the plain path's time over the fast path's, measured in the same run "
        "(multi-user: median of interleaved repeats, each with a fresh reader and cold footers; cache: one "
        "pass of the workload each, both readers starting cold). I/O is counted through CountingFileSystem "
        "(loop → histories). Hit rate counts decoded column chunks. Every fast-path result was compared "
        "with the plain one: " + ("all identical." if bench.ok else "FAILED: " + "; ".join(bench.failures)),
    ]
    return "\n".join(lines)
