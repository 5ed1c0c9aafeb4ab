"""Deterministic synthetic source stream: raw records as source partitions would deliver them.

The stream is produced processing window by processing window (``layout.window_seconds`` of arrival
time, ``generator.windows`` of them from ``generator.start_ts``). Memory holds one window of events
plus the few records delayed into later windows. The same configuration gives the same bytes: every
random draw comes from a numpy Generator seeded by (seed, stream, window), and per-user or per-item
attributes come from an integer hash, never from Python's ``hash()`` or the clock.

What the stream contains (shares as in ``GeneratorSpec``; all counted exactly in ``stats``):

- *events*: valid events, one first delivery each. Event time is uniform inside the window in which
  the event happens; a user's events per window come from a multinomial over the windows.
- *late*: first delivered in their own window, but after an event of the same user with a later
  event time (``late_share`` of all events).
- *very late*: first delivered 1 to 3 windows after the window their event time falls in, capped at
  the last window (``very_late_share`` of all events; drawn from the windows before the last).
- everything else arrives in event-time order per user, shortly after its event time.
- *duplicates*: an identical payload delivered again, same partition, larger LSN, same or a later
  window (``duplicate_share`` of events).
- *malformed*: extra records, ``malformed_share`` of all records, each with exactly one defect that
  ``payload.validate_payload`` reports as one of ``MALFORMED_REASONS``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from seqlake.core.config import ColumnSpec, Config, GeneratorSpec
from seqlake.core.errors import ConfigError
from seqlake.core.events import PAYLOAD_KEYS, RAW_SCHEMA
from seqlake.core.payload import INT_RANGES, MAX_PAYLOAD_BYTES
from seqlake.core.windows import Integers, window_of, window_start_ms

USER_ID_BASE = 1_000_000
MALFORMED_REASONS = (
    "invalid_json",
    "missing_user_id",
    "bad_user_id",
    "unknown_feature_group",
    "event_ts_out_of_range",
    "wrong_type",
    "oversize_value",
)
NATURAL_DELAY_MS = 2_000  # mean delay from event time to arrival for in-order events
LATE_DELAY_MS = 60_000  # mean extra delay of a late event beyond the event that overtakes it
LATER_DUPLICATE_SHARE = 0.2  # retransmissions that land in a later window than the original
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEED_MASK = (1 << 64) - 1
_JSON = json.JSONEncoder(separators=(",", ":"))


@dataclass(frozen=True)
class GeneratorStats:
    """Ground truth counted while generating; complete once ``batches()`` is exhausted."""

    events: int  # distinct valid events
    records: int  # raw records emitted: events + duplicates + malformed
    late: int  # out of order, first delivered inside their own window
    very_late: int  # first delivered in a later window than their event time's
    duplicates: int  # retransmitted copies
    malformed: dict[str, int]  # by reason, only reasons that occurred
    users: int
    history_lengths: np.ndarray  # valid events per user, index = user ordinal


def epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime, exactly (no float rounding)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def stream_window(ts_ms: int | np.ndarray, window_seconds: int, start: datetime | int) -> np.ndarray:
    """Processing window index of epoch-ms times, counted from the stream's ``start``."""
    start_ms = epoch_ms(start) if isinstance(start, datetime) else start
    return window_of(np.asarray(ts_ms, dtype=np.int64) - start_ms, window_seconds)


def user_id_of(ordinal: int | np.ndarray) -> np.ndarray:
    return USER_ID_BASE + np.asarray(ordinal, dtype=np.int64)


def partition_of(user_id: int | np.ndarray, partitions: int) -> np.ndarray:
    """Source partition of a user: the stream is keyed by user id, like a Kafka topic."""
    return (np.asarray(user_id, dtype=np.int64) % partitions).astype(np.int32)


def group_weights(count: int) -> np.ndarray:
    """Feature-group mix: the first group takes 80%, the rest share 20% decaying by 3x each."""
    if count == 1:
        return np.ones(1)
    rest = 3.0 ** -np.arange(count - 1)
    return np.concatenate([[0.8], 0.2 * rest / rest.sum()])


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """An independent, reproducible random stream per (seed, key)."""
    return np.random.default_rng(np.random.SeedSequence(seed & _SEED_MASK, spawn_key=key))


def pareto_lengths(users: int, min_events: int, alpha: float, cap: int, rng: np.random.Generator) -> np.ndarray:
    """History lengths: Pareto with tail index `alpha` from `min_events`, capped at `cap`. The one
    length distribution of every synthetic data set (the event stream, benchmarks, tests)."""
    u = 1.0 - rng.random(users)  # in (0, 1]
    lengths = np.floor(min_events * u ** (-1.0 / alpha))
    return np.minimum(lengths, cap).astype(np.int64)


def sample_history_lengths(spec: GeneratorSpec) -> np.ndarray:
    """Events per user: Pareto(length_alpha) from min_events, capped; heavy users get the cap."""
    lengths = pareto_lengths(spec.users, spec.min_events, spec.length_alpha, spec.max_events, rng_for(spec.seed, 0))
    lengths[: spec.heavy_users] = spec.max_events
    return lengths


@dataclass
class _Records:
    """Raw records before LSNs are assigned; ``kind`` 0 first delivery, 1 copy, 2 malformed."""

    partition: np.ndarray
    arrival: np.ndarray
    kind: np.ndarray
    ts: np.ndarray
    seq: np.ndarray
    payload: np.ndarray  # object array of str

    def __len__(self) -> int:
        return len(self.arrival)

    def take(self, index: np.ndarray) -> _Records:
        return _Records(*(getattr(self, f)[index] for f in _FIELDS))

    @staticmethod
    def concat(parts: Sequence[_Records]) -> _Records:
        return _Records(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("partition", "arrival", "kind", "ts", "seq", "payload")


class EventGenerator:
    """Generates the raw record stream of ``spec`` (default ``config.generator``)."""

    def __init__(self, config: Config, spec: GeneratorSpec | None = None):
        self.config = config
        self.spec = spec or config.generator
        self._window_ms = config.layout.window_seconds * 1000
        self._start_ms = epoch_ms(self.spec.start_ts)
        self._groups = list(config.feature_groups)
        self._group_p = group_weights(len(self._groups))
        self.history_lengths = sample_history_lengths(self.spec)
        windows = self.spec.windows
        self._counts = rng_for(self.spec.seed, 1).multinomial(self.history_lengths, np.full(windows, 1.0 / windows))
        self._user_ids = user_id_of(np.arange(self.spec.users))
        self._partitions = partition_of(self._user_ids, self.spec.source_partitions)
        per_window = self._counts.sum(axis=0)
        total, before_last = int(per_window.sum()), int(per_window[:-1].sum())
        # Only windows before the last can deliver later, so they carry the whole very-late share.
        self._very_late_rate = min(1.0, self.spec.very_late_share * total / before_last) if before_last else 0.0
        share = self.spec.malformed_share
        if share >= 1:
            raise ConfigError("generator.malformed_share = 1: malformed records are extra records")
        self._malformed_ratio = share / (1.0 - share)  # malformed per valid record
        self._reset()

    def _reset(self) -> None:
        self._seen = np.zeros(self.spec.users, dtype=np.int64)
        self._next_lsn = np.zeros(self.spec.source_partitions, dtype=np.int64)
        self._seq = 0
        self._events = self._late = self._very_late = self._dups = self._records = 0
        self._events_before_last = self._originals = self._valid = 0
        self._malformed: dict[str, int] = defaultdict(int)

    @property
    def stats(self) -> GeneratorStats:
        return GeneratorStats(
            events=self._events,
            records=self._records,
            late=self._late,
            very_late=self._very_late,
            duplicates=self._dups,
            malformed={r: self._malformed[r] for r in MALFORMED_REASONS if self._malformed[r]},
            users=self.spec.users,
            history_lengths=self.history_lengths,
        )

    def batches(self, batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """RAW_SCHEMA record batches of at most ``batch_rows`` rows, in arrival order."""
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be positive, not {batch_rows}")
        self._reset()
        pending: dict[int, list[_Records]] = defaultdict(list)
        for window in range(self.spec.windows):
            rng = rng_for(self.spec.seed, 2, window)
            parts = [self._own_window(window, rng, pending), *pending.pop(window, [])]
            delivered = _Records.concat(parts)
            copies = self._duplicates(window, delivered, rng, pending)
            malformed = self._malformed_records(window, len(delivered) + len(copies), rng)
            yield from self._emit(_Records.concat([delivered, copies, malformed]), batch_rows)

    # -- one window ---------------------------------------------------------------------------

    def _window_start(self, window: Integers) -> Integers:
        """The first epoch millisecond of the stream's window(s) `window` (counted from its start)."""
        return self._start_ms + window_start_ms(window, self.config.layout.window_seconds)

    def _bounds(self, window: int) -> tuple[int, int]:
        start = self._window_start(window)
        return start, start + self._window_ms

    def _next_seq(self, count: int) -> np.ndarray:
        self._seq += count
        return np.arange(self._seq - count, self._seq, dtype=np.int64)

    def _own_window(self, window: int, rng: np.random.Generator, pending: dict) -> _Records:
        """Events whose event time falls in ``window``; very late ones are parked in ``pending``."""
        start, end = self._bounds(window)
        counts = self._counts[:, window]
        ordinals = np.repeat(np.arange(self.spec.users), counts)
        # Leave 2 ms at the window end so arrivals can always follow their event inside the window.
        ts = start + rng.integers(0, self._window_ms - 2, len(ordinals))
        order = np.lexsort((ts, ordinals))
        ts = ts[order]
        # Per-user sequence number in event-time order across windows: a stable unique event id.
        number = self._seen[ordinals] + np.arange(len(ts)) - (np.cumsum(counts) - counts)[ordinals]
        self._seen += counts
        user_ids = self._user_ids[ordinals]
        event_ids = [f"{u}-{k}" for u, k in zip(user_ids.tolist(), number.tolist(), strict=True)]
        rows = self._event_rows(ordinals, ts, event_ids, rng)
        events = _Records(
            partition=self._partitions[ordinals],
            arrival=ts.copy(),
            kind=np.zeros(len(ts), dtype=np.int8),
            ts=ts,
            seq=self._next_seq(len(ts)),
            payload=np.array([_JSON.encode(r) for r in rows] or [], dtype=object),
        )
        self._events += len(ts)

        very_late = np.zeros(len(ts), dtype=bool)
        if window < self.spec.windows - 1:
            self._events_before_last += len(ts)
            target = round(self._very_late_rate * self._events_before_last) - self._very_late
            chosen = rng.choice(len(ts), min(max(target, 0), len(ts)), replace=False)
            very_late[chosen] = True
            self._very_late += len(chosen)
            parked = events.take(np.sort(chosen))
            delivery = np.minimum(window + rng.integers(1, 4, len(parked)), self.spec.windows - 1)
            parked.arrival = self._window_start(delivery) + rng.integers(0, self._window_ms, len(parked))
            for target_window in np.unique(delivery).tolist():
                pending[target_window].append(parked.take(delivery == target_window))
        events = events.take(~very_late)
        events.arrival = self._arrivals(ordinals[~very_late], events.ts, start, end, rng)
        return events

    def _arrivals(
        self, ordinals: np.ndarray, ts: np.ndarray, start: int, end: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Arrival times in [start, end) for events sorted by (user, event time); some made late."""
        n = len(ts)
        if n == 0:
            return ts.copy()
        new_user = np.r_[True, ordinals[1:] != ordinals[:-1]]
        group = np.cumsum(new_user) - 1
        last = (np.r_[np.flatnonzero(new_user)[1:], n] - 1)[group]  # last event of the user
        # In-order arrival: a short delay, then a running max per user keeps event-time order.
        delay = np.minimum(rng.exponential(NATURAL_DELAY_MS, n).astype(np.int64), self._window_ms)
        offset = group * self._window_ms
        arrival = np.minimum(ts + delay, end - 2) - start + offset
        arrival = np.maximum.accumulate(arrival) - offset + start

        # Late: an event with an earlier time than the user's last event in the window arrives
        # after a later event of that user that itself arrives in order.
        candidates = np.flatnonzero(ts < ts[last])
        target = round(self.spec.late_share * self._events) - self._late
        late = np.sort(rng.choice(candidates, min(max(target, 0), len(candidates)), replace=False))
        self._late += len(late)
        if len(late) == 0:
            return arrival
        index = np.arange(n)
        in_order = np.ones(n, dtype=bool)
        in_order[late] = False
        next_in_order = np.minimum.accumulate(np.where(in_order, index, n)[::-1])[::-1]
        time_key = offset + ts - start
        first_later = np.searchsorted(time_key, time_key[late], side="right")
        step = np.maximum(first_later, late + rng.integers(1, 6, len(late)))
        overtaker = next_in_order[np.minimum(step, last[late])]
        extra = 1 + rng.exponential(LATE_DELAY_MS, len(late)).astype(np.int64)
        late_arrival = np.maximum(arrival[late] + extra, arrival[overtaker] + 1)
        arrival[late] = np.minimum(late_arrival, end - 1)
        return arrival

    def _duplicates(self, window: int, delivered: _Records, rng: np.random.Generator, pending: dict) -> _Records:
        """Retransmit a share of this window's first deliveries; later-window copies go pending."""
        firsts = np.flatnonzero(delivered.kind == 0)  # copies parked earlier are not copied again
        self._originals += len(firsts)
        target = round(self.spec.duplicate_share * self._originals) - self._dups
        chosen = np.sort(rng.choice(firsts, min(max(target, 0), len(firsts)), replace=False))
        self._dups += len(chosen)
        copies = delivered.take(chosen)
        copies.kind = np.ones(len(copies), dtype=np.int8)
        copies.seq = self._next_seq(len(copies))
        _, end = self._bounds(window)
        later = rng.random(len(copies)) < LATER_DUPLICATE_SHARE
        if window == self.spec.windows - 1:
            later[:] = False
        delivery = np.where(
            later,
            np.minimum(window + rng.integers(1, 3, len(copies)), self.spec.windows - 1),
            window,
        )
        same = copies.arrival + (rng.random(len(copies)) * (end - copies.arrival)).astype(np.int64)
        other = self._window_start(delivery)
        other = other + rng.integers(0, self._window_ms, len(copies))
        copies.arrival = np.where(later, other, same)
        for target_window in np.unique(delivery[later]).tolist():
            pending[target_window].append(copies.take(later & (delivery == target_window)))
        return copies.take(~later)

    def _malformed_records(self, window: int, valid: int, rng: np.random.Generator) -> _Records:
        """Extra records with one defect each, so they are ``malformed_share`` of all records."""
        self._valid += valid
        total = sum(self._malformed.values())
        count = max(round(self._malformed_ratio * self._valid) - total, 0)
        start, _ = self._bounds(window)
        ordinals = rng.integers(0, self.spec.users, count)
        ts = start + rng.integers(0, self._window_ms - 2, count)
        seq = self._next_seq(count)
        users = self._user_ids[ordinals].tolist()
        ids = [f"{u}-x{s}" for u, s in zip(users, seq.tolist(), strict=True)]
        rows = self._event_rows(ordinals, ts, ids, rng)
        reasons = rng.integers(0, len(MALFORMED_REASONS), count)
        payloads = []
        for row, reason in zip(rows, reasons.tolist(), strict=True):
            payloads.append(self._corrupt(row, MALFORMED_REASONS[reason], rng))
            self._malformed[MALFORMED_REASONS[reason]] += 1
        return _Records(
            partition=self._partitions[ordinals],
            arrival=start + rng.integers(0, self._window_ms, count),
            kind=np.full(count, 2, dtype=np.int8),
            ts=ts,
            seq=seq,
            payload=np.array(payloads or [], dtype=object),
        )

    def _emit(self, records: _Records, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Sort by arrival, assign per-partition LSNs with no gaps, and cut into batches."""
        records = records.take(np.lexsort((records.seq, records.ts, records.kind, records.arrival)))
        partition = records.partition
        n = len(records)
        per_partition = np.bincount(partition, minlength=self.spec.source_partitions)
        firsts = np.cumsum(per_partition) - per_partition
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(partition, kind="stable")] = np.arange(n) - np.repeat(firsts, per_partition)
        lsn = self._next_lsn[partition] + rank
        self._next_lsn += per_partition
        self._records += n
        for lo in range(0, n, batch_rows):
            hi = min(lo + batch_rows, n)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(partition[lo:hi], pa.int32()),
                    pa.array(lsn[lo:hi], pa.int64()),
                    pa.array(records.arrival[lo:hi], RAW_SCHEMA.field("arrival_ts").type),
                    pa.array(records.payload[lo:hi].tolist(), pa.string()),
                ],
                schema=RAW_SCHEMA,
            )

    # -- payloads -----------------------------------------------------------------------------

    def _event_rows(
        self, ordinals: np.ndarray, ts: np.ndarray, event_ids: list[str], rng: np.random.Generator
    ) -> list[dict]:
        """Payload dicts: PAYLOAD_KEYS then the columns of a randomly drawn feature group."""
        n = len(ordinals)
        group_index = rng.choice(len(self._groups), size=n, p=self._group_p)
        user_ids = self._user_ids[ordinals]
        rows: list[dict] = [{}] * n
        for g, group in enumerate(self._groups):
            sel = np.flatnonzero(group_index == g)
            if len(sel) == 0:
                continue
            spec = self.config.feature_groups[group]
            users, items = user_ids[sel], item_ids(user_ids[sel], g, self.spec.items, rng)
            cache: dict = {}
            columns = {
                name: fit_column(
                    items if name == spec.item_column else column_values(name, col, users, ts[sel], items, rng, cache),
                    col,
                )
                for name, col in spec.columns.items()
            }
            keys = (*PAYLOAD_KEYS, *columns)
            values = zip(
                [event_ids[i] for i in sel.tolist()],
                user_ids[sel].tolist(),
                [group] * len(sel),
                ts[sel].tolist(),
                *columns.values(),
                strict=True,
            )
            for i, row in zip(sel.tolist(), values, strict=True):
                rows[i] = dict(zip(keys, row, strict=True))
        return rows

    def _corrupt(self, row: dict, reason: str, rng: np.random.Generator) -> str:
        """Serialize ``row`` with exactly one defect, the one validate_payload calls ``reason``."""
        spec = self.config.feature_groups[row["feature_group"]]
        if reason == "invalid_json":
            text = _JSON.encode(row)
            return text[: int(rng.integers(1, len(text) - 1))]  # truncated mid-record
        if reason == "missing_user_id":
            if rng.random() < 0.5:
                del row["user_id"]
            else:
                row["user_id"] = None
        elif reason == "bad_user_id":
            user = row["user_id"]
            row["user_id"] = f"u{user}x" if rng.random() < 0.5 else -user
        elif reason == "unknown_feature_group":
            row["feature_group"] = next(
                name
                for name in ("legacy_clicks", "ads_v0", "notifications", "unknown_group_x")
                if name not in self.config.feature_groups
            )
        elif reason == "event_ts_out_of_range":
            # Seconds or microseconds sent as milliseconds: 1970 or far beyond 2100.
            row["event_ts"] = row["event_ts"] // 1000 if rng.random() < 0.5 else row["event_ts"] * 1000
        elif reason == "wrong_type":
            name = list(spec.columns)[int(rng.integers(0, len(spec.columns)))]
            row[name] = _wrong_value(spec.columns[name])
        elif reason == "oversize_value":
            limited = {n: c.max_length for n, c in spec.columns.items() if c.max_length is not None}
            if not limited:  # no bounded string column: exceed the payload size limit instead
                return "{" + " " * MAX_PAYLOAD_BYTES + _JSON.encode(row)[1:]
            name = list(limited)[int(rng.integers(0, len(limited)))]
            length = limited[name] + 1 + int(rng.integers(0, 16))
            row[name] = ((row.get(name) or "x") * length)[:length]
        return _JSON.encode(row)


def _wrong_value(column: ColumnSpec) -> object:
    if column.type == "string":
        return 12345
    if column.type == "bool":
        return "yes"
    return "abc"


# -- attribute values ---------------------------------------------------------------------------
# Known column names get realistic values; any other column gets a plain value of its type. Values
# tied to an item (duration, author, price) or a user (device, country) come from a hash, so they
# stay consistent across events and windows without any lookup table.

FAVOURITES = 16  # per (user, group) favourite items, drawn Zipf-like
FAVOURITE_SHARE = 0.7  # share of interactions with a favourite: repeats within a window are common
_ZIPF = 1.0 / np.arange(1, FAVOURITES + 1)
_ZIPF /= _ZIPF.sum()
_COUNTRIES = np.array(["US", "BR", "IN", "ID", "MX", "DE", "GB", "FR", "JP", "TR"], dtype=object)
_CURRENCY = {"US": "USD", "BR": "BRL", "IN": "INR", "ID": "IDR", "MX": "MXN", "JP": "JPY"}
_CURRENCY |= {"DE": "EUR", "FR": "EUR", "GB": "GBP", "TR": "TRY"}
_SURFACES = np.array(["feed", "search", "profile", "explore"], dtype=object)
_DEVICES = np.array(["ios", "android", "web"], dtype=object)
_KIND = {"bool": "bool", "float32": "float", "float64": "float", "string": "string"}


def _mix64(*parts: int | np.ndarray) -> np.ndarray:
    """splitmix64-style hash of integer arrays (uint64 arithmetic wraps silently on arrays)."""
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(p)).astype(np.uint64) for p in parts))
    h = np.zeros(arrays[0].shape, dtype=np.uint64)
    for part in arrays:
        x = (h ^ part) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = x ^ (x >> np.uint64(31))
    return h


def _hash_int(modulus: int, *parts: int | np.ndarray) -> np.ndarray:
    return (_mix64(*parts) % np.uint64(modulus)).astype(np.int64)


def item_ids(user_ids: np.ndarray, group: int, items: int, rng: np.random.Generator) -> np.ndarray:
    """Item ids in 1..items: mostly the user's favourites (Zipf), else a popularity-skewed pick."""
    n = len(user_ids)
    favourite = 1 + _hash_int(items, user_ids, group, rng.choice(FAVOURITES, n, p=_ZIPF))
    # Log-uniform over the catalogue: density ~ 1/id, so low ids are the popular items.
    popular = np.clip(np.exp(rng.random(n) * np.log(items + 1)).astype(np.int64), 1, items)
    return np.where(rng.random(n) < FAVOURITE_SHARE, favourite, popular)


def _known_values(
    name: str,
    user_ids: np.ndarray,
    ts: np.ndarray,
    items: np.ndarray,
    rng: np.random.Generator,
    cache: dict,
) -> np.ndarray | None:
    """Realistic values for a known column name, or None."""
    n = len(user_ids)
    if name in ("duration_ms", "watch_time_ms", "completion_ratio", "action_flags", "dwell_ms"):
        if "completion" not in cache:
            cache["duration"] = 5_000 + _hash_int(595_000, items, 1)  # 5 s .. 10 min per item
            cache["completion"] = rng.beta(0.7, 1.0, n)
        duration, completion = cache["duration"], cache["completion"]
        watch = np.floor(duration * completion).astype(np.int64)  # never above the duration
        if name == "duration_ms":
            return duration
        if name == "watch_time_ms":
            return watch
        if name == "completion_ratio":
            return np.round(watch / duration, 4)
        if name == "dwell_ms":
            return watch + rng.exponential(1_500, n).astype(np.int64)
        # Bits: 1 view, 2 like, 4 share, 8 follow, 16 comment, 32 skip.
        flags = np.ones(n, dtype=np.int64)
        flags |= 2 * (rng.random(n) < 0.05 + 0.2 * completion)
        flags |= 4 * (rng.random(n) < 0.02) | 8 * (rng.random(n) < 0.01)
        flags |= 16 * (rng.random(n) < 0.03) | 32 * (completion < 0.1)
        return flags

    def country() -> np.ndarray:
        return _COUNTRIES[_hash_int(len(_COUNTRIES), user_ids, 3)]  # fixed per user

    values = {
        "category_id": lambda: _hash_int(400, items, 2),
        "author_id": lambda: 10_000_000 + _hash_int(200_000, items, 3),
        "price_cents": lambda: 99 + _hash_int(50_000, items, 4),
        "surface": lambda: rng.choice(_SURFACES, n, p=[0.7, 0.1, 0.1, 0.1]),
        "device": lambda: _DEVICES[np.minimum(_hash_int(20, user_ids, 5) // 9, 2)],
        "country": country,
        "currency": lambda: np.array([_CURRENCY[c] for c in country().tolist()], dtype=object),
        "position": lambda: rng.geometric(0.15, n) - 1,
        "result_position": lambda: rng.geometric(0.3, n) - 1,
        "impression_count": lambda: 1 + rng.poisson(0.3, n),
        "click_count": lambda: rng.poisson(0.6, n),
        "quantity": lambda: 1 + rng.poisson(0.2, n),
        "is_autoplay": lambda: rng.random(n) < 0.3,
        "session_id": lambda: (_mix64(user_ids, ts // 1_800_000) >> np.uint64(1)).astype(np.int64),
        "query_hash": lambda: (
            _mix64(user_ids, 6, rng.choice(8, n, p=_ZIPF[:8] / _ZIPF[:8].sum())) >> np.uint64(1)
        ).astype(np.int64),
    }
    return values[name]() if name in values else None


def column_values(
    name: str,
    column: ColumnSpec,
    user_ids: np.ndarray,
    ts: np.ndarray,
    items: np.ndarray,
    rng: np.random.Generator,
    cache: dict,
) -> np.ndarray:
    """Values of one attribute column; known names are realistic, others generic by type."""
    kind = _KIND.get(column.type, "int")
    values = _known_values(name, user_ids, ts, items, rng, cache)
    if values is not None:
        is_string = values.dtype == object
        is_kind = {"string": is_string, "bool": values.dtype == bool}.get(kind)
        numeric = not is_string and values.dtype != bool
        if is_kind or (is_kind is None and numeric):
            return values
    n = len(user_ids)
    if kind == "string":
        return np.array([f"{name}_{k}" for k in rng.choice(8, n, p=_ZIPF[:8] / _ZIPF[:8].sum())])
    if kind == "bool":
        return rng.random(n) < 0.3
    if kind == "float":
        return np.round(rng.random(n), 4)
    return rng.integers(0, min(INT_RANGES[column.type][1], 100_000) + 1, n)


def fit_column(values: np.ndarray, column: ColumnSpec) -> list:
    """Python values that fit the declared type: ints clipped to width, strings to max_length."""
    if column.type in INT_RANGES:
        low, high = INT_RANGES[column.type]
        return np.clip(values.astype(np.int64), max(low, -(2**62)), high).tolist()
    if column.type == "string":
        texts = [str(v) for v in values.tolist()]
        limit = column.max_length
        return [t[:limit] for t in texts] if limit else texts
    if column.type == "bool":
        return values.astype(bool).tolist()
    return values.astype(np.float64).tolist()
