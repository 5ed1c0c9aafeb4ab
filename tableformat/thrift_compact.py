"""Thrift compact protocol, generically: enough to read Parquet's footer and page index structures and
to write a footer back (the byte layout is Apache Thrift's; Parquet's own structures are in
parquet.thrift). A struct decodes to a list of `[field_id, type, value]` so that re-encoding keeps
every field and type it did not touch."""

from __future__ import annotations

import struct as _struct

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)

Fields = list  # [[field_id, type, value], ...]


class _Reader:
    def __init__(self, data: bytes | memoryview, position: int = 0) -> None:
        self.data = memoryview(data)
        self.position = position

    def byte(self) -> int:
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int):
        if kind in (TRUE, FALSE):
            return kind == TRUE
        if kind == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            (value,) = _struct.unpack_from("<d", self.data, self.position)
            self.position += 8
            return value
        if kind == BINARY:
            n = self.varint()
            value = bytes(self.data[self.position : self.position + n])
            self.position += n
            return value
        if kind in (LIST, SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return (element, [self.element(element) for _ in range(size)])
        if kind == MAP:
            size = self.varint()
            if not size:
                return (0, 0, [])
            types = self.byte()
            key, val = types >> 4, types & 0x0F
            return (key, val, [(self.element(key), self.element(val)) for _ in range(size)])
        if kind == STRUCT:
            return self.struct()
        raise ValueError(f"unknown thrift compact type {kind}")

    def element(self, kind: int):
        if kind in (TRUE, FALSE):
            return self.byte() == TRUE
        return self.value(kind)

    def struct(self) -> Fields:
        fields: Fields = []
        last = 0
        while True:
            header = self.byte()
            if header == STOP:
                return fields
            kind, delta = header & 0x0F, header >> 4
            field_id = last + delta if delta else self.zigzag()
            fields.append([field_id, kind, self.value(kind)])
            last = field_id


def decode(data: bytes | memoryview, position: int = 0) -> tuple[Fields, int]:
    """One struct from `data` at `position`, and the position after it."""
    reader = _Reader(data, position)
    return reader.struct(), reader.position


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, kind: int, value) -> None:
        if kind in (TRUE, FALSE):
            return
        if kind == BYTE:
            self.out.append(value & 0xFF)
        elif kind in (I16, I32, I64):
            self.zigzag(value)
        elif kind == DOUBLE:
            self.out += _struct.pack("<d", value)
        elif kind == BINARY:
            self.varint(len(value))
            self.out += value
        elif kind in (LIST, SET):
            element, items = value
            if len(items) < 15:
                self.out.append(len(items) << 4 | element)
            else:
                self.out.append(0xF0 | element)
                self.varint(len(items))
            for item in items:
                self.element(element, item)
        elif kind == MAP:
            key, val, items = value
            self.varint(len(items))
            if items:
                self.out.append(key << 4 | val)
                for k, v in items:
                    self.element(key, k)
                    self.element(val, v)
        elif kind == STRUCT:
            self.struct(value)
        else:
            raise ValueError(f"unknown thrift compact type {kind}")

    def element(self, kind: int, value) -> None:
        if kind in (TRUE, FALSE):
            self.out.append(TRUE if value else FALSE)
        else:
            self.value(kind, value)

    def struct(self, fields: Fields) -> None:
        last = 0
        for field_id, kind, value in sorted(fields, key=lambda f: f[0]):
            if kind in (TRUE, FALSE):
                kind = TRUE if value else FALSE
            delta = field_id - last
            if 0 < delta <= 15:
                self.out.append(delta << 4 | kind)
            else:
                self.out.append(kind)
                self.zigzag(field_id)
            self.value(kind, value)
            last = field_id
        self.out.append(STOP)


def encode(fields: Fields) -> bytes:
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)


def get(fields: Fields, field_id: int, default=None):
    for fid, _, value in fields:
        if fid == field_id:
            return value
    return default


def replaced(fields: Fields, changes: dict[int, tuple[int, object] | None]) -> Fields:
    """A copy of `fields` with fields set (`id: (type, value)`) or dropped (`id: None`)."""
    out = [list(f) for f in fields if f[0] not in changes]
    out += [[fid, kind_value[0], kind_value[1]] for fid, kind_value in changes.items() if kind_value is not None]
    return sorted(out, key=lambda f: f[0])
