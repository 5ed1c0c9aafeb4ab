"""The measurement behind the layout policy: candidate layouts of one history file, side by side.

Every variant stores the same synthetic rows (one bucket file: heavy-tailed history lengths, a few
users at `heavy_rows`). Byte metrics are counted exactly (CountingFileSystem); times are medians and
are reported as ratios to the default layout, measured in the same run with the variants interleaved,
so machine noise and drift hit every variant alike. Never read the absolute times as thresholds.

Variants change one dimension of the default (seqlake.tableformat.layout.DEFAULT_POLICY, key-only
statistics, 64 KiB pages):
  control      the default again (A/A)       its time ratios are the run's noise floor
  encoding     fixed by type                 LayoutPolicy.choose_encodings=False (the default
                                             chooses each file's encodings from its rows)
  codec        zstd-1/3/9, snappy, none      LayoutPolicy.compression (floats, strings, user_id)
               integers under zstd           LayoutPolicy.packed_compression, both of the
                                             encodings fixed by type
  encoding     plain integers, all zstd      writer options (the layout before delta-packed integers);
                                             row groups copied from the default file
  row groups   dedicated x packed grid       LayoutPolicy through HistoryFileWriter
               no user alignment             fixed 128K-row row groups, same writer options
  statistics   all columns                   writer options; row groups copied from the default file
  page size    8 KiB, 1 MiB, 4,096 rows,     LayoutPolicy through HistoryFileWriter
               no row limit
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.synthetic import history_lengths, increasing_per_user, pick_groups, skewed_values, synthetic_rows
from seqlake.core.config import Config, load_config
from seqlake.core.windows import window_of
from seqlake.tableformat.encoding_choice import Choice
from seqlake.tableformat.footer import FileFacts
from seqlake.tableformat.io import CountingFileSystem, FooterCache, PlainFileSystem, read_footer
from seqlake.tableformat.layout import DEFAULT_POLICY, LayoutPolicy, parquet_writer_options
from seqlake.tableformat.reader import read_user_from_file
from seqlake.tableformat.writer import HistoryFileWriter

LOOKUP_COLUMNS = ["event_ts", "item_id"]
# HistoryFileWriter's default, which the run writer uses: it sizes the user_id bloom filter.
EXPECTED_USERS = 65_536
UNALIGNED_ROW_GROUP_ROWS = 128 * 1024
WRITE_BATCH_ROWS = 8192
DEFAULT_VARIANT = "default"
CONTROL_VARIANT = "default again (A/A)"

# (key, label, unit, scale): every metric is a median over repeats and is also reported as a ratio.
METRICS = [
    ("file_bytes", "file", "MiB", 2**20),
    ("footer_bytes", "footer", "KiB", 2**10),
    ("heavy_lookup_bytes", "heavy lookup (cold)", "KiB", 2**10),
    ("light_lookup_bytes", "light lookup (cold)", "KiB", 2**10),
    ("lookup_bytes", "mean lookup (warm footer)", "KiB", 2**10),
    ("lookup_s", "lookup p50 (warm footer)", "µs", 1e-6),
    ("scan_all_s", "scan all cols", "ms", 1e-3),
    ("scan_2col_s", "scan 2 cols", "ms", 1e-3),
    ("encode_s", "encode", "ms", 1e-3),
]

_DROP = object()  # an option override that removes the option
PLAIN_INTEGERS_VARIANT = "plain integers, all zstd"
FIXED_ENCODINGS_VARIANT = "encodings fixed by type"
PLAIN_INTEGERS = {
    "compression": "zstd",
    "compression_level": 3,
    "column_encoding": {name: "DELTA_BINARY_PACKED" for name in ("event_ts", "lsn", "min_lsn")},
    "max_rows_per_page": _DROP,
}


@dataclass(frozen=True)
class Variant:
    name: str
    group: str
    policy: LayoutPolicy = DEFAULT_POLICY
    # Overrides of parquet_writer_options(...) (value _DROP removes the key); such a variant is written
    # with pq.ParquetWriter, cutting row groups exactly where the default file has them.
    options: dict = field(default_factory=dict)
    # Plain fixed-size row groups (no user alignment) instead of HistoryFileWriter's placement.
    fixed_row_group_rows: int | None = None


def variants() -> list[Variant]:
    """The candidate layouts: each differs from the default in one dimension."""
    # The control: the default layout once more. Its time ratios show the run's noise floor.
    out = [Variant(DEFAULT_VARIANT, "default"), Variant(CONTROL_VARIANT, "control")]
    # Encodings and codecs fixed by type (the layout before each file chose its own), and its codecs.
    fixed = replace(DEFAULT_POLICY, choose_encodings=False)
    out.append(Variant(FIXED_ENCODINGS_VARIANT, "encoding", fixed))
    for level in (1, 3, 9):
        policy = replace(fixed, compression="zstd", compression_level=level)
        out.append(Variant(f"zstd-{level}", "codec", policy))
    for codec in ("snappy", "none"):
        out.append(Variant(codec, "codec", replace(fixed, compression=codec)))
    out.append(Variant("integers under zstd", "codec", replace(fixed, packed_compression="zstd")))
    # The layout before integers were delta-packed: plain integers and floats, every column under zstd.
    out.append(Variant(PLAIN_INTEGERS_VARIANT, "encoding", options=PLAIN_INTEGERS))
    for dedicated in (256, 1024, 4096):
        for packed in (4096, 16_384, 65_536):
            policy = replace(DEFAULT_POLICY, dedicated_user_rows=dedicated, packed_row_group_rows=packed)
            if policy != DEFAULT_POLICY:
                out.append(Variant(f"dedicated {dedicated} / packed {packed}", "row groups", policy))
    out.append(Variant("no user alignment (128K rows)", "row groups", fixed_row_group_rows=UNALIGNED_ROW_GROUP_ROWS))
    out.append(Variant("stats: all columns", "statistics", options={"write_statistics": True}))
    for size, label in ((8 * 1024, "8 KiB"), (1024 * 1024, "1 MiB")):
        out.append(Variant(f"pages {label}", "page size", replace(DEFAULT_POLICY, data_page_size=size)))
    out.append(Variant("pages of at most 4,096 rows", "page size", replace(DEFAULT_POLICY, max_rows_per_page=4096)))
    out.append(Variant("no page row limit", "page size", replace(DEFAULT_POLICY, max_rows_per_page=None)))
    return out


# -- data ----------------------------------------------------------------------------------------


def history_rows(config: Config, users: int, heavy_users: int, heavy_rows: int, seed: int) -> pa.Table:
    """One bucket's history rows, ordered by (user_id, feature_group, event_ts, lsn): Pareto lengths
    (the configured tail index) capped at `heavy_rows`, and `heavy_users` users at exactly that;
    attribute values as skewed as real ones (`benchmarks.synthetic.skewed_values`), since the layout
    is chosen on how they compress."""
    rng = np.random.default_rng(seed)
    gen = config.generator
    lengths = history_lengths(users, heavy_users, heavy_rows, gen.min_events, gen.length_alpha, rng)
    user_ids = 1_000_000 + np.cumsum(rng.integers(1, 50, users))
    n = int(lengths.sum())
    # Per user, event times advance 1-60 s per row from a start within the first day; LSNs follow
    # arrival (time) with jitter; rows aggregate a few events each.
    elapsed = increasing_per_user(lengths, rng, 1_000_000, 60_000_000)
    elapsed += np.repeat(rng.integers(0, 86_400_000_000, users), lengths)
    lsn = elapsed // 1000 + rng.integers(0, 1000, n)
    event_count = np.minimum(rng.geometric(0.6, n), 50)
    return synthetic_rows(
        config,
        user_id=np.repeat(user_ids, lengths),
        feature_group=pick_groups(config, n, rng),
        event_ts_us=int(gen.start_ts.timestamp()) * 1_000_000 + elapsed,
        lsn=lsn,
        min_lsn=lsn - (event_count - 1) * rng.integers(1, 200, n),
        event_count=event_count,
        window_id=window_of(elapsed // 1000, config.layout.window_seconds),
        values=lambda name, kind, size, generator: skewed_values(name, kind, size, generator, gen.items),
        rng=rng,
        bucketed=False,
    )


# -- writing -------------------------------------------------------------------------------------


def _options(schema: pa.Schema, variant: Variant, recorded: pq.FileMetaData) -> dict:
    # The encodings the footer `recorded` holds (the default file's for a variant written with options,
    # which then differs from the default in its own dimension only).
    facts = FileFacts.from_metadata(recorded.metadata)
    choices = {name: Choice(*choice) for name, choice in facts.encodings.items()} if facts else None
    options = parquet_writer_options(schema, variant.policy, EXPECTED_USERS, choices)
    for key, value in variant.options.items():
        if value is _DROP:
            options.pop(key, None)
        else:
            options[key] = value
    return options


def _encode(sink, data: pa.Table, options: dict, sizes: Sequence[int], metadata: dict | None) -> None:
    with pq.ParquetWriter(sink, data.schema, **options) as writer:
        offset = 0
        for size in sizes:
            writer.write_table(data.slice(offset, size), row_group_size=size)
            offset += size
        if metadata:
            writer.add_key_value_metadata(metadata)


def _row_group_sizes(meta: pq.FileMetaData) -> list[int]:
    return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]


def _write_variant(
    variant: Variant, data: pa.Table, path: Path, config: Config, default: pq.FileMetaData | None
) -> pq.FileMetaData:
    schema = data.schema
    if variant.fixed_row_group_rows is None and not variant.options:
        writer = HistoryFileWriter(
            str(path),
            schema,
            run_id="bench",
            bucket=0,
            group_order=list(config.feature_groups),
            policy=variant.policy,
            expected_users=EXPECTED_USERS,
        )
        for batch in data.to_batches(max_chunksize=WRITE_BATCH_ROWS):
            writer.write(batch)
        writer.close()
    else:
        assert default is not None, "the default variant is written first"
        if variant.fixed_row_group_rows:
            step = variant.fixed_row_group_rows
            sizes = [min(step, data.num_rows - o) for o in range(0, data.num_rows, step)]
        else:
            sizes = _row_group_sizes(default)
        # The same footer facts as the default file: footers differ by layout only.
        _encode(str(path), data, _options(schema, variant, default), sizes, default.metadata)
    return pq.read_metadata(path)


# -- reading -------------------------------------------------------------------------------------


def _cold_lookup(path: str, user_id: int) -> tuple[int, pa.Table]:
    """Bytes a lookup reads with nothing cached (footer included), and its result."""
    fs = CountingFileSystem()
    footers = FooterCache()
    # The footer is read here as a cold lookup would (two exact reads), not verified: the variants
    # change statistics and encodings on purpose, which the layout digest is there to refuse.
    with fs.open_input_file(path) as handle:
        footers.put(path, read_footer(handle))
    result = read_user_from_file(fs, footers, path, user_id, LOOKUP_COLUMNS)
    return fs.stats.bytes_read, result


def _warm_lookup_bytes(path: str, users: list[int]) -> float:
    """Mean bytes a lookup reads once the footer is cached, over `users`."""
    fs, footers = CountingFileSystem(), FooterCache()
    footers.put(path, pq.read_metadata(path))
    for user in users:
        read_user_from_file(fs, footers, path, user, LOOKUP_COLUMNS)
    return fs.stats.bytes_read / len(users)


def _digest(tables: Sequence[pa.Table]) -> str:
    sha = hashlib.sha256()
    for table in tables:
        sha.update(table["event_ts"].cast(pa.int64()).to_numpy().tobytes())
        sha.update(pc.fill_null(table["item_id"], -1).to_numpy().tobytes())
    return sha.hexdigest()[:16]


def _timed(action: Callable[[], object], budget_s: float = 0.05, max_runs: int = 20) -> float:
    """The fastest of a few runs (at least 2, more while under `budget_s`), as timeit does: a run slowed
    down by another process on the machine is discarded instead of skewing the sample."""
    best, spent, runs = float("inf"), 0.0, 0
    while runs < 2 or (spent < budget_s and runs < max_runs):
        start = time.perf_counter()
        action()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


def _scan(path: str, columns: list[str] | None) -> int:
    return sum(b.num_rows for b in pq.ParquetFile(path).iter_batches(columns=columns))


def _measure(
    variant: Variant, path: str, meta: pq.FileMetaData, data: pa.Table, users: list[int]
) -> tuple[dict[str, float], int]:
    """One timing sample of each timed metric, and the rows the timed lookups returned."""
    fs, footers = PlainFileSystem(), FooterCache()
    footers.put(path, meta)  # variants differ on purpose: their footers are not checked against a digest
    times, rows = [], 0
    for user in users:
        start = time.perf_counter()
        rows += read_user_from_file(fs, footers, path, user, LOOKUP_COLUMNS).num_rows
        times.append(time.perf_counter() - start)
    options, sizes = _options(data.schema, variant, meta), _row_group_sizes(meta)
    return {
        "lookup_s": statistics.median(times),
        "scan_all_s": _timed(lambda: _scan(path, None)),
        "scan_2col_s": _timed(lambda: _scan(path, LOOKUP_COLUMNS)),
        "encode_s": _timed(lambda: _encode(pa.BufferOutputStream(), data, options, sizes, None)),
    }, rows


# -- the benchmark -------------------------------------------------------------------------------


def run_layout_bench(
    users: int = 3000,
    heavy_users: int = 3,
    heavy_rows: int = 20000,
    seed: int = 1,
    repeats: int = 3,
    *,
    lookups: int = 200,
    config: Config | None = None,
) -> list[dict]:
    """Measure every variant of `variants()` on the same rows; one dict per variant, default first.

    Keys: variant, group, default (bool), lookups, rows, row_groups, heavy_rows/light_rows (rows the
    cold lookups returned), lookup_rows (rows of all timed lookups), result_digest (of the cold
    lookups' results), every METRICS key (bytes are counted exactly, times are medians over repeats)
    and `<key>_ratio` (to the default variant; exactly 1.0 on its own row).
    """
    if repeats < 1 or lookups < 1:
        raise ValueError("repeats and lookups must be at least 1")
    config = config or load_config()
    data = history_rows(config, users, heavy_users, heavy_rows, seed)
    user_col = data["user_id"].to_numpy()
    ids, counts = np.unique(user_col, return_counts=True)
    heavy_user = int(ids[np.argmax(counts)])
    light = counts < heavy_rows if (counts < heavy_rows).any() else np.ones(len(ids), bool)
    # The light user: the median history length among the users below heavy_rows.
    light_user = int(ids[light][np.argsort(counts[light], kind="stable")[light.sum() // 2]])
    lookup_users = np.random.default_rng(seed + 1).choice(ids, lookups).tolist()

    candidates = variants()
    with tempfile.TemporaryDirectory(prefix="seqlake-layout-bench-") as tmp:
        paths, metas, results = {}, {}, {}
        default_meta = None
        for i, variant in enumerate(candidates):
            path = Path(tmp) / f"v{i:02d}.parquet"
            meta = _write_variant(variant, data, path, config, default_meta)
            default_meta = default_meta or meta
            paths[variant.name], metas[variant.name] = str(path), meta
            heavy_bytes, heavy = _cold_lookup(str(path), heavy_user)
            light_bytes, light = _cold_lookup(str(path), light_user)
            results[variant.name] = {
                "variant": variant.name,
                "group": variant.group,
                "default": variant.name == DEFAULT_VARIANT,
                "lookups": len(lookup_users),
                "rows": meta.num_rows,
                "row_groups": meta.num_row_groups,
                "heavy_rows": heavy.num_rows,
                "light_rows": light.num_rows,
                "result_digest": _digest([heavy, light]),
                "file_bytes": Path(path).stat().st_size,
                "footer_bytes": meta.serialized_size,
                "heavy_lookup_bytes": heavy_bytes,
                "light_lookup_bytes": light_bytes,
                "lookup_bytes": _warm_lookup_bytes(str(path), lookup_users),
            }

        samples: dict[str, dict[str, list[float]]] = {v.name: {} for v in candidates}
        # One untimed pass first: thread pools, allocator and caches warm up on it, not on a variant.
        _measure(candidates[0], paths[DEFAULT_VARIANT], metas[DEFAULT_VARIANT], data, lookup_users)
        for r in range(repeats):
            # Interleaved, alternating order: drift and noise of a shared machine hit all variants.
            for variant in candidates if r % 2 == 0 else candidates[::-1]:
                times, lookup_rows = _measure(variant, paths[variant.name], metas[variant.name], data, lookup_users)
                results[variant.name]["lookup_rows"] = lookup_rows
                for key, value in times.items():
                    samples[variant.name].setdefault(key, []).append(value)

    rows = []
    for variant in candidates:
        row = results[variant.name]
        row.update({key: statistics.median(values) for key, values in samples[variant.name].items()})
        rows.append(row)
    base = results[DEFAULT_VARIANT]
    for row in rows:
        for key, *_ in METRICS:
            row[f"{key}_ratio"] = row[key] / base[key]
    return rows


def format_table(rows: list[dict]) -> str:
    """A markdown table: each metric as `value ×ratio-to-default`."""
    header = ["group", "variant", "row groups"] + [f"{label}, {unit}" for _, label, unit, _ in METRICS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---:|" * len(METRICS)]
    for row in rows:
        name = f"**{row['variant']}**" if row.get("default") else row["variant"]
        cells = [row["group"], name, str(row["row_groups"])]
        for key, _, unit, scale in METRICS:
            value = row[key] / scale
            digits = {"µs": 0, "ms": 1}.get(unit, 2)
            cells.append(f"{value:,.{digits}f} ×{row[f'{key}_ratio']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    if rows:
        first = rows[0]
        lines.append("")
        lines.append(
            f"{first['rows']:,} rows in one bucket file. ×: ratio to the default ({_describe_default()}). "
            f"Lookups project {LOOKUP_COLUMNS}: cold = "
            f"bytes counted with no footer cached (heavy user: {first['heavy_rows']:,} rows, light user: "
            f"{first['light_rows']:,} rows); mean and p50 are over {first['lookups']} random users "
            "(uniform, so mostly short histories) with the footer cached and the OS cache warm. Bytes are "
            "counted exactly; scan and encode times are the fastest of a few runs, every time a median "
            "over repeats interleaved across variants: compare ratios (the A/A row shows the noise), "
            "not absolute values."
        )
    return "\n".join(lines)


def _describe_default() -> str:
    p = DEFAULT_POLICY
    rows = f" of at most {p.max_rows_per_page:,} rows" if p.max_rows_per_page else ""
    return (
        f"encodings and codecs chosen per file from its first {p.encoding_sample_rows:,} rows, "
        f"dedicated {p.dedicated_user_rows}, packed {p.packed_row_group_rows}, "
        f"key-only statistics, {p.data_page_size // 1024} KiB pages{rows}"
    )
