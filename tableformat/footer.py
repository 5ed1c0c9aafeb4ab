"""Footer key-value metadata of a history file: what fsck and readers check without reading rows."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

PREFIX = "seqlake."


@dataclass(frozen=True)
class FileFacts:
    """Facts about one history file, stored in its Parquet footer under `seqlake.*` keys."""

    format_version: str
    run_id: str
    bucket: int
    row_count: int
    key_min: list  # [user_id, feature_group, event_ts_us, lsn]
    key_max: list
    lsn_ranges: dict[str, list[int]] = field(default_factory=dict)  # partition -> [min, max]
    windows: list[int] = field(default_factory=list)  # [first, last] window ids
    checksum: str = ""

    def to_metadata(self) -> dict[str, str]:
        return {PREFIX + k: json.dumps(v) for k, v in asdict(self).items()}

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> FileFacts | None:
        """Parse the facts from a footer's key-value metadata; None if this is no seqlake file."""
        if not metadata or (PREFIX + "format_version").encode() not in metadata:
            return None
        values = {
            key.decode()[len(PREFIX) :]: json.loads(value)
            for key, value in metadata.items()
            if key.decode().startswith(PREFIX)
        }
        known = {k: values[k] for k in cls.__dataclass_fields__ if k in values}
        return cls(**known)
