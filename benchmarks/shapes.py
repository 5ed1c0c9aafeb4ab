"""Attribute values and event times shaped like production data, for the benchmarks' history rows.

`realistic` (the default of the benchmarks that take `--data`):
- item, author, session and query ids are wide hashes (48 to 63 bits), as snowflake or hashed ids
  are, not small integers that pack into a few bits;
- items are drawn with Zipf popularity from a catalog, and each user returns to an interest set of
  their own for most of their events;
- an item's attributes (author, category, duration, price, currency) are the item's, the same in
  every row that names it;
- categorical strings are few and skewed; counts and durations log-normal;
- event times come in bursty sessions: seconds apart inside a session, hours between sessions.

`small-ids` keeps `benchmarks.synthetic.column_values`: uniform small integers and a few strings,
the easy case for integer encodings, shown beside realistic data and never alone.
"""

from __future__ import annotations

import numpy as np

DATA_SHAPES = ("realistic", "small-ids")

CATALOG_ITEMS = 200_000
ITEMS_PER_AUTHOR = 20
CATEGORIES = 5_000
QUERIES = 100_000
INTEREST_ITEMS = 64  # a user's own interest set
RETURN_SHARE = 0.6  # the share of a user's events on items of their interest set
SESSION_EVENTS = 20  # events per session, on average
IN_SESSION_GAP_S = 30.0  # mean gap inside a session
BETWEEN_SESSIONS_GAP_S = 8 * 3600.0  # mean gap between sessions

VOCABULARIES = {
    "surface": ("feed", "search", "profile", "explore", "notifications", "stories"),
    "device": ("android", "ios", "web", "tv", "tablet"),
    "country": ("US", "IN", "BR", "ID", "MX", "DE", "GB", "FR", "JP", "TR", "PH", "VN", "IT", "ES", "CA", "KR"),
    "currency": ("USD", "EUR", "INR", "BRL", "GBP", "JPY", "MXN", "IDR"),
}

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def wide_ids(keys: np.ndarray) -> np.ndarray:
    """Hashed 63-bit ids of integer keys (splitmix64's finalizer), >= 2^47: what hashed ids look like."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(1)) | np.uint64(1 << 47)).astype(np.int64)


def zipf_weights(n: int, exponent: float = 1.1) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def _skewed_choice(options: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return options[rng.choice(len(options), n, p=zipf_weights(len(options), 1.3))]


def bursty_offsets(lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Event-time offsets in microseconds, increasing per user (users in the order of `lengths`),
    that come in sessions: each event starts a new session with probability 1/SESSION_EVENTS."""
    n = int(lengths.sum())
    new_session = rng.random(n) < 1 / SESSION_EVENTS
    gaps_s = np.where(new_session, rng.exponential(BETWEEN_SESSIONS_GAP_S, n), 1 + rng.exponential(IN_SESSION_GAP_S, n))
    step = (gaps_s * 1_000_000).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    elapsed = np.cumsum(step)
    return elapsed - np.repeat(elapsed[starts] - step[starts], lengths)


class RealisticValues:
    """`values(name, kind, n, rng)` for `benchmarks.synthetic.synthetic_rows`: one value per row of
    `user_id` (in that order), shaped as the module says."""

    def __init__(self, user_id: np.ndarray, rng: np.random.Generator, items: int = CATALOG_ITEMS) -> None:
        n = len(user_id)
        users, user_index = np.unique(user_id, return_inverse=True)
        popularity = zipf_weights(items)
        interests = rng.choice(items, (len(users), INTEREST_ITEMS), p=popularity)
        own = interests[user_index, rng.integers(0, INTEREST_ITEMS, n)]
        anywhere = rng.choice(items, n, p=popularity)
        self.item = np.where(rng.random(n) < RETURN_SHARE, own, anywhere)  # catalog index of each row's item
        authors = max(1, items // ITEMS_PER_AUTHOR)
        self.author_of = rng.choice(authors, items, p=zipf_weights(authors))
        self.category_of = rng.choice(CATEGORIES, items, p=zipf_weights(CATEGORIES)).astype(np.int32)
        self.duration_of = np.clip(rng.lognormal(10.5, 1.0, items), 1_000, 3_600_000).astype(np.int32)
        self.price_of = np.clip(rng.lognormal(7.5, 1.5, items), 1, 10**9).astype(np.int64)
        self.currency_of = _skewed_choice(np.array(VOCABULARIES["currency"]), items, rng)
        # A session is a run of a user's rows; its id a hash of the user and the session's number.
        new_session = rng.random(n) < 1 / SESSION_EVENTS
        self.session = wide_ids(np.cumsum(new_session) * 1_000_003 + user_id.astype(np.int64))

    def __call__(self, name: str, kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
        if name == "item_id":
            return wide_ids(self.item)
        if name == "author_id":
            return wide_ids(self.author_of[self.item] + (1 << 40))  # not an item's hash
        if name == "category_id":
            return self.category_of[self.item]
        if name == "duration_ms":
            return self.duration_of[self.item]
        if name == "price_cents":
            return self.price_of[self.item]
        if name == "currency":
            return self.currency_of[self.item]
        if name == "session_id":
            return self.session
        if name == "query_hash":
            return wide_ids(rng.choice(QUERIES, n, p=zipf_weights(QUERIES)) + (1 << 41))
        if name == "action_flags":  # a view, sometimes a like, a share, a follow ...
            bits = rng.random((n, 8)) < np.array([1.0, 0.08, 0.02, 0.01, 0.03, 0.2, 0.02, 0.005])
            return (bits * (1 << np.arange(8))).sum(axis=1).astype(np.int32)
        if name == "watch_time_ms":
            return (self.duration_of[self.item] * rng.beta(2, 2, n)).astype(np.int32)
        if kind == "string":
            vocabulary = VOCABULARIES.get(name, tuple(f"{name[:3]}{i}" for i in range(50)))
            return _skewed_choice(np.array(vocabulary), n, rng)
        if kind == "bool":
            return rng.random(n) < 0.3
        if kind.startswith("float"):
            return rng.beta(2, 2, n).astype(kind)
        if kind in ("int8", "int16"):  # positions, ranks: small and skewed
            return np.minimum(rng.zipf(1.5, n) - 1, 100 if kind == "int8" else 1000).astype(kind)
        if kind == "int64" and name.endswith("_id"):
            return wide_ids(rng.choice(QUERIES, n, p=zipf_weights(QUERIES)) + (1 << 42))
        return np.minimum(rng.lognormal(4, 1.5, n), np.iinfo(np.int32).max).astype(kind)  # counts, durations
