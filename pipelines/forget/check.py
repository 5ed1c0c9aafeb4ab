"""`seqlake forget --check USER`: prove from the keyed hash alone that a user was forgotten.

The audit and the tombstones keep no id in clear, only the user's keyed hash
(`seqlake.core.forget_key`): the check hashes the id it is given, finds the requests that name that
hash, and then looks for the user everywhere a forget removes rows (every table with a `user_id`,
history included, and the landing tier) and in the raw source tables (records the tombstones cover that
`maintain` has not rewritten yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.core.forget_key import forget_key, user_hash
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.forget import audit as forget_audit
from seqlake.pipelines.forget.landing import landing_rows
from seqlake.pipelines.forget.remove import tables_with_users, user_rows
from seqlake.pipelines.ingest import tombstones as forget_tombstones
from seqlake.pipelines.landing.tables import LandingTier


@dataclass
class Proof:
    user: int
    requests: list[dict] = field(default_factory=list)  # id, by, recorded, done
    rows_left: dict[str, int] = field(default_factory=dict)  # table -> rows of the user
    raw_left: int = 0  # raw source records of the user the tombstones cover, not yet rewritten
    tombstone_partitions: int = 0

    @property
    def forgotten(self) -> bool:
        done = bool(self.requests) and all(r["done_at"] for r in self.requests)
        return done and not self.rows_left and self.tombstone_partitions > 0


def check_forgotten(config: Config, user: int, landing: LandingTier | None) -> Proof:
    key = forget_key()
    assert key is not None
    hashed = user_hash(key, user)
    proof = Proof(user)
    for request in forget_audit.requests(config):
        if hashed in request.hashes or user in request.users:
            proof.requests.append(
                {
                    "forget_id": request.forget_id,
                    "requested_by": request.requested_by,
                    "recorded_at": request.recorded_at.isoformat(),
                    "done_at": request.done_at.isoformat() if request.done_at else None,
                }
            )
    history, _ = history_tables(config)
    for table in [history, *tables_with_users(config)]:
        held = user_rows(table, [user])
        if held:
            proof.rows_left[table.name()[-1]] = held
    if landing is not None:
        held = landing_rows(landing, [user])
        if held:
            proof.rows_left["landing"] = held
    tombstones = forget_tombstones.current(config)
    mine = tombstones.rows.filter(pa.compute.equal(tombstones.rows["user_hash"], hashed))
    proof.tombstone_partitions = mine.num_rows
    if mine.num_rows:
        own = forget_tombstones.Tombstones(mine, key)
        con = connect(extensions=())
        try:
            for table in forget_tombstones.raw_tables(config):
                if table.current_snapshot() is None:
                    continue
                con.register("_raw", table.scan().to_arrow())
                total = con.execute("SELECT count(*) FROM _raw").fetchone()
                kept = con.execute(f"SELECT count(*) FROM ({own.raw_kept_sql('_raw')})").fetchone()
                con.unregister("_raw")
                proof.raw_left += int(total[0]) - int(kept[0]) if total and kept else 0
        finally:
            con.close()
    return proof
