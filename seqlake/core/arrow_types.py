"""The Arrow type of each column kind a configuration may declare (`int32`, `string`, ...)."""

from __future__ import annotations

import pyarrow as pa

ARROW_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
}
