"""URIs as they may be shown to people: never with a password."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<secret>[^@/\s]*)@")
_SECRET_PARAM = re.compile(
    r"(?P<key>(?:password|passwd|pwd|secret|token|access[_-]?key|secret[_-]?key|session[_-]?token)=)[^&;\s]*",
    re.IGNORECASE,
)


def masked_uri(uri: str) -> str:
    """`uri` with the password of its user info and any secret-looking query parameter replaced by
    `***` (SQLAlchemy, JDBC and S3 URIs alike)."""
    shown = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", uri)
    return _SECRET_PARAM.sub(lambda m: f"{m['key']}***", shown)


def masked_text(text: str, *uris: str) -> str:
    """`text` with every occurrence of each of `uris` masked (for messages from other libraries)."""
    for uri in uris:
        if uri and uri in text:
            text = text.replace(uri, masked_uri(uri))
    return masked_uri(text)
