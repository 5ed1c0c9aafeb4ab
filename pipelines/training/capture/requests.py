"""Request simulator: inference requests of active users, with labels, deterministic per seed.

A user active in a capture period (events arrived in it) sends Poisson-many requests with mean
K x period / day, K = `training.requests_per_active_user_per_day`. Each request carries a click label,
a dwell-time label and two small features, as a logged training row would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from seqlake.core.config import Config
from seqlake.pipelines.training.capture.pointers import Request

SURFACES = ("feed", "search", "profile", "notifications")
DAY = timedelta(days=1)


class RequestSimulator:
    def __init__(self, config: Config) -> None:
        self.spec = config.training
        self.seed = config.generator.seed
        self.period = timedelta(seconds=config.layout.window_seconds / self.spec.captures_per_window)

    def requests(self, active_users: list[int], at: datetime, point: int) -> list[Request]:
        """Requests served at `at` (capture point number `point`) for the users active just before."""
        rng = np.random.default_rng([self.seed, point])
        mean = self.spec.requests_per_active_user_per_day * (self.period / DAY)
        counts = rng.poisson(mean, len(active_users))
        out = []
        for user, count in zip(active_users, counts, strict=True):
            for n in range(int(count)):
                click = bool(rng.random() < self.spec.click_share)
                out.append(
                    Request(
                        request_id=f"{user}-{point}-{n}",
                        user_id=int(user),
                        request_ts=at,
                        label_click=click,
                        label_dwell_ms=int(rng.integers(1_000, 120_000)) if click else 0,
                        surface=SURFACES[int(rng.integers(len(SURFACES)))],
                        hour_of_day=at.astimezone(UTC).hour,
                    )
                )
        return out
