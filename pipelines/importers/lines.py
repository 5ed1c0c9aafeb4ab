"""A text file as blocks of whole lines, the lines that cannot be read as text taken out and named.

pyarrow's CSV reader refuses a whole file for one line that is not UTF-8, or one longer than its
block size ("straddling object"). Here the file is read in blocks that end at a line end, so a line
never straddles two blocks: a block is as long as its longest line, up to `max_line_bytes`. Each
block is checked as UTF-8 in one call; only a block that fails is searched for its bad lines. A line
that is not UTF-8, or longer than `max_line_bytes` (skipped to its end without holding it in memory),
is taken out of its block, its line end kept (an empty line, which the parsers skip, so line numbers
hold), and named by a `BadLine`: its number, the reason and what quarantine can safely keep of it.

Line ends are those of pyarrow's reader and Python's universal newlines: `\\n`, `\\r\\n` and a lone
`\\r`. Lines are numbered from 1, every line counted (empty ones too).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa

DEFAULT_MAX_LINE_BYTES = 8 << 20  # no event comes near it: a payload over 64 KiB is quarantined anyway
# What quarantine keeps of a line longer than this: its start. Escaped (\xNN, JSON), it stays far below
# the payload limit (`payload.MAX_PAYLOAD_BYTES`), so the record is quarantined as unreadable_line.
KEPT_BYTES = 4096

_LF, _CR = 10, 13


@dataclass(frozen=True)
class BadLine:
    """A line that could not be read: its number in the file, why, and the text quarantine keeps."""

    number: int
    reason: str
    text: str


@dataclass
class Block:
    """Whole lines of the file from line `first_line`; a bad line's bytes are taken out (its line end
    is kept), and named in `bad`, in line order."""

    data: bytes
    first_line: int
    bad: list[BadLine] = field(default_factory=list)

    def line_numbers(self) -> np.ndarray:
        """The numbers of the block's non-empty lines, in order: what pyarrow's rows are (its
        `InvalidRow.number` counts them from 1 within the block)."""
        starts, lengths = _lines(self.data)
        return self.first_line + np.flatnonzero(lengths > 0)

    def line(self, number: int) -> bytes:
        """The bytes of one line of the block (without its line end)."""
        starts, lengths = _lines(self.data)
        index = number - self.first_line
        return self.data[int(starts[index]) : int(starts[index] + lengths[index])]

    def after(self, number: int) -> Block:
        """The block from the line after line `number` on (its bad lines after it)."""
        starts, _ = _lines(self.data)
        index = number - self.first_line + 1
        start = int(starts[index]) if index < len(starts) else len(self.data)
        return Block(self.data[start:], number + 1, [b for b in self.bad if b.number > number])


def kept_text(line: bytes | str) -> str:
    """What quarantine keeps of a line: its text (bytes that are not UTF-8 spelled `\\xNN`), cut to
    its first `KEPT_BYTES` if longer."""
    if isinstance(line, str):
        return line if len(line) <= KEPT_BYTES else line[:KEPT_BYTES]
    return bytes(line[:KEPT_BYTES]).decode("utf-8", "backslashreplace")


def too_long_reason(length: int, limit: int) -> str:
    kept = f"; its first {KEPT_BYTES:,} bytes kept" if length > KEPT_BYTES else ""
    return f"longer than max_line_bytes ({length:,} bytes, limit {limit:,}{kept})"


def blocks(handle: BinaryIO, block_bytes: int, max_line_bytes: int) -> Iterator[Block]:
    """The file's blocks of whole lines: at least `block_bytes` each (but the last), longer only as
    far as a line needs, up to `max_line_bytes`."""
    line = 1  # number of the first line of `pending`
    pending = b""  # the start of lines not yet in a block
    after_cr = False  # the data so far ended with \r: a \n that follows belongs to its line end
    long: tuple[int, bytes, int] | None = None  # a line past the limit, skipped: (number, start, bytes seen)
    bad: list[BadLine] = []  # named, not yet given with a block
    while True:
        data = handle.read(block_bytes)
        eof = not data
        if after_cr and data[:1] == b"\n":
            data = data[1:]
        after_cr = False
        if long is not None:  # skip to the end of the long line
            end = _first_end(data)
            number, start, seen = long
            if len(start) < KEPT_BYTES:
                start += data[: end if end >= 0 else len(data)][: KEPT_BYTES - len(start)]
            if end < 0 and not eof:
                long = (number, start, seen + len(data))
                continue
            length = seen + max(end, 0)
            bad.append(BadLine(number, too_long_reason(length, max_line_bytes), kept_text(start)))
            long, line = None, number + 1
            if end >= 0:
                after = end + (2 if data[end : end + 2] == b"\r\n" else 1)
                after_cr = after == len(data) and data[after - 1] == _CR
                data = data[after:]
        text = pending + data if pending else data
        if eof:  # the last line needs no line end
            if text or bad:
                yield _block(text, line, max_line_bytes, bad)
            return
        cut = max(text.rfind(b"\n"), text.rfind(b"\r")) + 1
        if cut == 0:  # no line ends here yet
            if len(text) > max_line_bytes:
                long, pending = (line, text[:KEPT_BYTES], len(text)), b""
            else:
                pending = text
            continue
        after_cr = text[cut - 1] == _CR and cut == len(text)
        block, pending = text[:cut], text[cut:]
        yield _block(block, line, max_line_bytes, bad)
        line += _count_ends(block)
        bad = []


def _block(data: bytes, line: int, max_line_bytes: int, bad: list[BadLine]) -> Block:
    """A block of whole lines from line `line`, its lines that cannot be read taken out."""
    found = list(bad)
    too_long = len(data) > max_line_bytes  # then a line here can be over the limit
    not_utf8 = not _is_utf8(data)
    if not (too_long or not_utf8):
        return Block(data, line, found)
    starts, lengths = (column.tolist() for column in _lines(data))
    out: set[int] = set()  # indexes of the lines taken out
    if too_long:
        for index in np.flatnonzero(np.array(lengths) > max_line_bytes).tolist():
            start, length = starts[index], lengths[index]
            text = kept_text(data[start : start + min(length, KEPT_BYTES)])
            found.append(BadLine(line + index, too_long_reason(length, max_line_bytes), text))
            out.add(index)
    if not_utf8:
        for index in _not_utf8(data).tolist():
            if index not in out:
                start = starts[index]
                found.append(BadLine(line + index, "not UTF-8 text", kept_text(data[start : start + lengths[index]])))
                out.add(index)
    if out:
        parts, at = [], 0
        for index in sorted(out):
            parts.append(data[at : starts[index]])
            at = starts[index + 1] if index + 1 < len(starts) else len(data)
            # The line and its end become one empty line: \r\n, which no line end before or after it
            # can join (a lone \r before and an \n after would read as one \r\n, one line fewer).
            if starts[index] + lengths[index] < len(data):
                parts.append(b"\r\n")
        parts.append(data[at:])
        data = b"".join(parts)
    return Block(data, line, sorted(found, key=lambda b: b.number))


def _is_utf8(data: bytes) -> bool:
    """Arrow's UTF-8 check of the whole block at once."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _not_utf8(data: bytes) -> np.ndarray:
    """The indexes of the lines that are not UTF-8, found set-based. Decoded with surrogateescape,
    each byte that is not UTF-8 becomes a lone surrogate (U+DC80..U+DCFF), which surrogatepass
    writes as ED B2 xx or ED B3 xx: bytes no UTF-8 text holds, and the line ends stay where they
    are, so the lines of the result are the block's lines."""
    marked = data.decode("utf-8", "surrogateescape").encode("utf-8", "surrogatepass")
    raw = np.frombuffer(marked, np.uint8)
    escaped = np.flatnonzero((raw[:-1] == 0xED) & ((raw[1:] == 0xB2) | (raw[1:] == 0xB3)))
    starts, _ = _lines(marked)
    return np.unique(np.searchsorted(starts, escaped, side="right") - 1)


def _first_end(data: bytes, start: int = 0) -> int:
    """Position of the first line end at or after `start` (its \\r or \\n), or -1."""
    ends = [i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0]
    return min(ends) if ends else -1


def _count_ends(data: bytes) -> int:
    lf = int(np.count_nonzero(np.frombuffer(data, np.uint8) == _LF))
    if data.find(b"\r") < 0:
        return lf
    return lf + data.count(b"\r") - data.count(b"\r\n")


def _lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(start, length without its line end) of every line of `data`; a last line without a line end
    counts."""
    raw = np.frombuffer(data, np.uint8)
    lf = raw == _LF
    cr = raw == _CR
    lone_cr = cr.copy()
    lone_cr[:-1] &= ~lf[1:]
    ends = np.flatnonzero(lf | lone_cr)  # the last byte of each line end
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(raw)]))  # where each line's content ends (before \r\n: fixed below)
    crlf = np.zeros(len(ends), dtype=bool)
    has_before = ends > 0
    crlf[has_before] = lf[ends[has_before]] & cr[ends[has_before] - 1]
    stops[:-1] -= crlf
    if len(starts) and starts[-1] == len(raw):  # data ends with a line end: no line after it
        starts, stops = starts[:-1], stops[:-1]
    return starts, np.maximum(stops - starts, 0)
