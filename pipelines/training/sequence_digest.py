"""The sequence checksum of tableformat/SPEC.md ("Sequence checksum"), in integer arithmetic only.

Every value becomes a fixed number of pieces by its type (integers, timestamps and booleans their
two's complement bits, floats their sign, binary exponent and fraction, strings the first 8 bytes
of the SHA-256 of their UTF-8 bytes; 16 bits a piece, the first one tagged present, a null all
zeros). A row's digest is four lanes, each a polynomial hash modulo p = 2^31 - 1 of the row's
pieces (Horner's rule from 1, one base per lane); a sequence's checksum folds its rows' lane values
the same way, oldest row first: 16 bytes. A row shared by many sequences is digested once, and a
sequence's checksum is a sum of its rows' lane values times powers of the base, so a batch of
sequences is one vectorized pass whatever their overlap.

Three implementations agree byte for byte: numpy over Arrow (`row_lanes`, `fold_checksums`: the
samples job and capture), DuckDB SQL and Spark SQL (`row_lanes_sql`, `checksum_sql`), built-in
functions only, no step beyond 2^63 (neither DuckDB nor Spark in ANSI mode overflows).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Literal

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Dialect = Literal["duckdb", "spark"]
CHECKSUM_BYTES = 16  # 128 bits: a light pointer, still collision-safe
MODULUS = 2**31 - 1
BASES = (2037298730, 1757586490, 1092327019, 1665092365)  # primitive roots modulo MODULUS, lane 0..3
PRESENT = 1 << 16  # added to a present value's first piece (a null's pieces are all zero)
MASK = 0xFFFF
# A float's first piece: PRESENT + sign * 4096 + code, the code the binary exponent + EXPONENT_BIAS
# for a finite non-zero value (1..2098), else one of these.
EXPONENT_BIAS = 1075
ZERO_CODE, NAN_CODE, INF_CODE = 0, 4094, 4095
FRACTION_BITS = 52
MAX_DOUBLE = "1.7976931348623157E308"


def piece_count(kind: pa.DataType) -> int:
    """How many pieces a value of Arrow type `kind` gives."""
    if pa.types.is_floating(kind):
        return 5  # first piece (sign, exponent code), then the 52-bit fraction in 4 pieces
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return 4
    if pa.types.is_timestamp(kind):
        return 4
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind):
        return {1: 1, 2: 1, 4: 2, 8: 4}[max(kind.bit_width, 8) // 8]
    raise TypeError(f"no sequence checksum pieces for {kind}")


def _powers(base: int, count: int) -> np.ndarray:
    """base^0 .. base^(count - 1) modulo MODULUS (doubling: each step multiplies numbers < 2^31)."""
    out = np.ones(1, np.int64)
    while len(out) < count:
        step = pow(base, len(out), MODULUS)
        out = np.concatenate([out, out * step % MODULUS])
    return out[:count]


def _weights(pieces: int) -> tuple[np.ndarray, np.ndarray]:
    """Horner's rule from 1 over `pieces` values x_j equals lead + sum(x_j * w_j) modulo p with
    lead = B^J and w_j = B^(J-1-j): the weights (J, 4) and the leads (4,) of the four lanes."""
    weights = np.stack([_powers(b, pieces + 1)[pieces - 1 :: -1] if pieces else np.ones(0, np.int64) for b in BASES])
    leads = np.array([pow(b, pieces, MODULUS) for b in BASES], np.int64)
    return weights.T.copy(), leads


# -- numpy over Arrow ----------------------------------------------------------------------------

_local = threading.local()


def _hasher() -> duckdb.DuckDBPyConnection:
    """A plain in-memory DuckDB connection of this thread, for SHA-256 of strings."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect(config={"autoinstall_known_extensions": False})
    return con


ROWS_PER_STEP = 1 << 15  # rows whose pieces are laid out at once (a few MiB: the layout stays in cache)


def _int_pieces(values: np.ndarray, count: int, present, out: np.ndarray) -> None:
    """Into out[i] (i < count): the 16-bit pieces of int64 values, most significant first (a null
    is 0 in `values` and not `present`)."""
    for i in range(count):
        np.bitwise_and(values >> (16 * (count - 1 - i)), MASK, out=out[i])
    out[0] += present


def _float_pieces(values: np.ndarray, present, out: np.ndarray) -> None:
    """Into out[0..4]: sign and exponent code, then the fraction, as SPEC.md defines them for a
    double (taken from its IEEE bits)."""
    bits = values.view(np.int64)
    sign = (bits >> 63) & 1
    biased = (bits >> FRACTION_BITS) & 0x7FF
    fraction = bits & ((1 << FRACTION_BITS) - 1)
    code = biased - 1023 + EXPONENT_BIAS
    special = biased == 0x7FF
    zero = (biased == 0) & (fraction == 0)
    nan = special & (fraction != 0)
    subnormal = (biased == 0) & (fraction != 0)
    if subnormal.any():
        top = np.frexp(fraction[subnormal].astype(np.float64))[1].astype(np.int64) - 1  # highest set bit
        code[subnormal] = top - 1074 + EXPONENT_BIAS
        fraction[subnormal] = (fraction[subnormal] << (FRACTION_BITS - top)) - (1 << FRACTION_BITS)
    code[zero] = ZERO_CODE
    code[special] = INF_CODE
    code[nan] = NAN_CODE
    sign[zero | nan] = 0
    fraction[zero | special] = 0
    out[0] = present + sign * 4096 + code  # a null (0.0 in `values`) has sign and code 0
    for i, shift in enumerate((48, 32, 16, 0)):
        np.bitwise_and(fraction >> shift, MASK, out=out[1 + i])


FEW_STRINGS = 512  # distinct values hashed with hashlib; more go through DuckDB's vectorized sha256


def _string_pieces(strings: pa.Array) -> np.ndarray:
    """The first 8 bytes of the SHA-256 of each (non-null, distinct) string, as 4 pieces, the first
    tagged: (n, 4). A column's distinct values are few (a dictionary): hashing them costs less than
    a query; many go to DuckDB in one vectorized pass."""
    if len(strings) <= FEW_STRINGS:
        digests = b"".join(hashlib.sha256(s.encode()).digest()[:8] for s in strings.to_pylist())
        table = np.frombuffer(digests, ">u2").astype(np.int64).reshape(len(strings), 4)
        table[:, 0] += PRESENT
        return table
    con = _hasher().cursor()
    try:
        con.register("_strings", pa.table({"i": np.arange(len(strings), dtype=np.int64), "s": strings}))
        pieces = ", ".join(f"{_hex_piece('h', i, 'duckdb')} AS p{i}" for i in range(4))
        hashed = con.execute(
            f"SELECT {pieces} FROM (SELECT i, sha256(s) AS h FROM _strings) ORDER BY i"
        ).to_arrow_table()
    finally:
        con.close()
    table = np.stack([hashed[f"p{i}"].to_numpy() for i in range(4)], axis=1).astype(np.int64)
    table[:, 0] += PRESENT
    return table


def _flat(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values.dictionary_decode() if pa.types.is_dictionary(values.type) else values


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _strings_per_row(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (pieces of each distinct value plus a null row of zeros, row -> index)."""
    encoded = pc.dictionary_encode(values)
    table = np.concatenate([_string_pieces(encoded.dictionary.cast(pa.string())), np.zeros((1, 4), np.int64)])
    return table, encoded.indices.fill_null(len(table) - 1).to_numpy(zero_copy_only=False)


def _numbers(values: pa.Array, kind: pa.DataType) -> np.ndarray:
    """A non-string column as numpy (int64, or float64 for floats), nulls as zero."""
    if pa.types.is_floating(kind):
        return values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(kind):
        values = values.cast(pa.timestamp("us", tz=kind.tz))
    return values.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)


def _write_pieces(numbers: np.ndarray, kind: pa.DataType, present, out: np.ndarray) -> None:
    if pa.types.is_floating(kind):
        _float_pieces(numbers, present, out)
    else:
        _int_pieces(numbers, piece_count(kind), present, out)


def _present(values: pa.Array):
    """PRESENT for every value (a scalar when nothing is null), 0 for nulls."""
    if values.null_count == 0:
        return PRESENT
    return values.is_valid().to_numpy(zero_copy_only=False).astype(np.int64) * PRESENT


def value_pieces(values: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> np.ndarray:
    """The pieces of every value of a column: (n, piece_count(kind)) int64."""
    values = _flat(values)
    if _is_string(kind):
        table, indices = _strings_per_row(values)
        return table[indices]
    out = np.empty((piece_count(kind), len(values)), np.int64)
    _write_pieces(_numbers(values, kind), kind, _present(values), out)
    return out.T


ROWS_PER_STEP = 1 << 15  # rows whose pieces are laid out at once (a few MiB: they stay in cache)


def row_lanes(rows: pa.Table, schema: pa.Schema) -> np.ndarray:
    """Each row's digest, its four lane values: (4, n) int64, each below MODULUS. `rows` holds the
    fields of `schema` (by name); the pieces are taken in `schema`'s order.

    Each lane is lead + sum(piece_j * w_j): the pieces of many rows are laid out piece by piece and
    multiplied by the weights in one product; a string column adds the weighted pieces of its
    distinct values, looked up per row. Each product is below 2^48 and a row has far fewer than
    2^15 pieces, so the sums stay below 2^63."""
    n = rows.num_rows
    counts = [piece_count(f.type) for f in schema]
    weights, leads = _weights(sum(counts))
    total = np.repeat(leads[:, None], n, axis=1)
    numeric, numeric_weights, first = [], [], 0
    for field, count in zip(schema, counts, strict=True):
        values = _flat(rows[field.name])
        own = weights[first : first + count]
        first += count
        if _is_string(field.type):
            table, indices = _strings_per_row(values)
            per_value = (table @ own).T  # a null's pieces are zeros: it adds nothing
            total += per_value[:, indices]
            continue
        numeric.append((field.type, _numbers(values, field.type), _present(values), count))
        numeric_weights.append(own)
    if numeric:
        matrix = np.concatenate(numeric_weights)
        for start in range(0, n, ROWS_PER_STEP):
            stop = min(n, start + ROWS_PER_STEP)
            pieces = np.empty((len(matrix), stop - start), np.int64)
            at = 0
            for kind, numbers, present, count in numeric:
                present = present if np.isscalar(present) else present[start:stop]
                _write_pieces(numbers[start:stop], kind, present, pieces[at : at + count])
                at += count
            total[:, start:stop] += np.einsum("jm,jk->km", pieces, matrix)
    return total % MODULUS


def fold_checksums(lanes: np.ndarray, take: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each sequence's four lanes (P, 4): sequence p holds rows `take[offsets[p]:offsets[p + 1]]` of
    `lanes` (4, n), oldest first. Horner's rule from 1 over the rows' lane values equals B^n plus the sum of
    each row's value times B^(rows after it), so every sequence is a segmented sum."""
    offsets = np.asarray(offsets, np.int64)
    lengths = np.diff(offsets)
    total = int(offsets[-1]) if len(offsets) else 0
    exponents = np.repeat(offsets[1:] - 1, lengths) - np.arange(total, dtype=np.int64)
    longest = int(lengths.max(initial=0)) + 1
    out = np.empty((len(lengths), 4), np.int64)
    for k, base in enumerate(BASES):
        powers = _powers(base, longest)
        terms = lanes[k][take] * powers[exponents] % MODULUS
        sums = np.concatenate([[0], np.cumsum(terms)])  # below 2^31 * rows: far from 2^63
        out[:, k] = (powers[lengths] + sums[offsets[1:]] - sums[offsets[:-1]]) % MODULUS
    return out


def checksum_bytes(folded: np.ndarray) -> pa.Array:
    """The checksums (binary, CHECKSUM_BYTES each) of folded lanes (P, 4): lanes big-endian, lane 0 first."""
    data = np.ascontiguousarray(folded.astype(">u4")).tobytes()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(CHECKSUM_BYTES), len(folded), [None, pa.py_buffer(data)])
    return fixed.cast(pa.binary())


def sequence_checksums_of(rows: pa.Table, schema: pa.Schema, lengths: np.ndarray) -> pa.Array:
    """The checksums of consecutive sequences of `rows` (`lengths[i]` rows each, in order)."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    lanes = row_lanes(rows, schema)
    return checksum_bytes(fold_checksums(lanes, np.arange(rows.num_rows, dtype=np.int64), offsets))


# -- SQL (DuckDB and Spark) ----------------------------------------------------------------------


def _text(dialect: Dialect) -> str:
    return "string" if dialect == "spark" else "VARCHAR"


def _hex_piece(digest: str, i: int, dialect: Dialect) -> str:
    """SQL for the 16-bit piece `i` (0..3, big-endian) of a hex digest."""
    hex4 = f"substring({digest}, {4 * i + 1}, 4)"
    if dialect == "spark":
        return f"CAST(conv({hex4}, 16, 10) AS BIGINT)"
    return f"CAST(concat('0x', {hex4}) AS BIGINT)"


def _shift(v: str, bits: int, dialect: Dialect) -> str:
    if bits == 0:
        return v
    return f"shiftright({v}, {bits})" if dialect == "spark" else f"({v} >> {bits})"


def _float_parts(v: str) -> tuple[str, str, str]:
    """SQL for |v|, the binary exponent e (1 <= |v| / 2^e < 2, exactly: both engines compute log2
    with their own libm, so it is corrected) and the significand |v| * 2^(52 - e) of a double."""
    a = f"abs(CAST({v} AS DOUBLE))"
    e0 = f"CAST(floor(log2({a})) AS BIGINT)"
    e = f"({e0} + CASE WHEN {a} >= power(2.0, {e0} + 1) THEN 1 WHEN {a} < power(2.0, {e0}) THEN -1 ELSE 0 END)"
    # |v| * 2^(52 - e) in two exact steps (neither factor overflows, even for subnormal doubles).
    k1 = f"CAST(floor((52 - {e}) / 2) AS BIGINT)"
    significand = f"CAST({a} * power(2.0, {k1}) * power(2.0, 52 - {e} - {k1}) AS BIGINT)"
    return a, e, significand


def string_digest_sql(v: str, dialect: Dialect) -> str:
    """SQL for the SHA-256 (hex) of a string's UTF-8 bytes."""
    return f"sha2({v}, 256)" if dialect == "spark" else f"sha256({v})"


def value_pieces_sql(v: str, kind: pa.DataType, dialect: Dialect, digest: str | None = None) -> list[str]:
    """SQL (BIGINT) for each piece of the value of expression `v` of Arrow type `kind` (`digest`:
    for a string, an expression holding its `string_digest_sql` already)."""
    if pa.types.is_floating(kind):
        a, e, significand = _float_parts(v)
        finite = f"{v} IS NOT NULL AND NOT isnan({v}) AND {v} <> 0 AND {a} <= {MAX_DOUBLE}"
        sign = f"CASE WHEN {v} < 0 THEN 4096 ELSE 0 END"
        first = (
            f"CASE WHEN {v} IS NULL THEN 0 WHEN isnan({v}) THEN {PRESENT + NAN_CODE} "
            f"WHEN {v} = 0 THEN {PRESENT + ZERO_CODE} WHEN {a} > {MAX_DOUBLE} THEN {PRESENT + INF_CODE} + {sign} "
            f"ELSE {PRESENT} + {sign} + {e} + {EXPONENT_BIAS} END"
        )
        fraction = f"({significand} - {1 << FRACTION_BITS})"
        rest = [f"CASE WHEN {finite} THEN {_shift(fraction, s, dialect)} & {MASK} ELSE 0 END" for s in (48, 32, 16, 0)]
        return [first, *rest]
    if pa.types.is_string(kind):
        digest = digest or string_digest_sql(v, dialect)
        pieces = [_hex_piece(digest, i, dialect) for i in range(4)]
        pieces[0] = f"{pieces[0]} + {PRESENT}"
        return [f"CASE WHEN {v} IS NULL THEN 0 ELSE {p} END" for p in pieces]
    if pa.types.is_timestamp(kind):
        number = f"unix_micros({v})" if dialect == "spark" else f"epoch_us({v})"
    elif pa.types.is_boolean(kind):
        number = f"CASE WHEN {v} THEN 1 ELSE 0 END"
    elif pa.types.is_integer(kind):
        number = f"CAST({v} AS BIGINT)"
    else:
        raise TypeError(f"no sequence checksum pieces for {kind}")
    count = piece_count(kind)
    pieces = [f"{_shift(number, 16 * (count - 1 - i), dialect)} & {MASK}" for i in range(count)]
    pieces[0] = f"({pieces[0]}) + {PRESENT}"
    return [f"CASE WHEN {v} IS NULL THEN 0 ELSE {p} END" for p in pieces]


def row_pieces_sql(
    schema: pa.Schema, columns: list[str], dialect: Dialect, digests: dict[str, str] | None = None
) -> list[str]:
    """SQL (BIGINT) for every piece of the row whose values are the scalar expressions `columns`
    (one per field of `schema`, in order); `digests` maps a string column to an expression holding
    its digest, computed once."""
    digests = digests or {}
    return [
        f"CAST({p} AS BIGINT)"
        for c, f in zip(columns, schema, strict=True)
        for p in value_pieces_sql(c, f.type, dialect, digests.get(c))
    ]


def lanes_of_pieces_sql(pieces: list[str]) -> list[str]:
    """SQL (BIGINT) for the four lane values of a row from its pieces (BIGINT expressions, in order):
    lead + sum(piece * weight) modulo p, each product below 2^48."""
    weights, leads = _weights(len(pieces))
    lanes = []
    for k in range(4):
        terms = " + ".join(f"({p}) * {int(w)}" for p, w in zip(pieces, weights[:, k], strict=True))
        lanes.append(f"(({int(leads[k])} + {terms}) % {MODULUS})" if pieces else str(int(leads[k])))
    return lanes


def row_lanes_sql(schema: pa.Schema, columns: list[str], dialect: Dialect) -> list[str]:
    """SQL (BIGINT) for the four lane values of the row whose values are the scalar expressions
    `columns` (one per field of `schema`, in order)."""
    return lanes_of_pieces_sql(row_pieces_sql(schema, columns, dialect))


def lane_fold_sql(values: str, lane: int, dialect: Dialect) -> str:
    """SQL for lane `lane` of a sequence from the list (BIGINT) of its rows' values for that lane."""
    step = f"(a * {BASES[lane]} + x) % {MODULUS}"
    if dialect == "spark":
        return f"aggregate({values}, CAST(1 AS BIGINT), (a, x) -> {step})"
    return f"list_reduce({values}, lambda a, x: {step}, CAST(1 AS BIGINT))"


def combine_sql(lanes: list[str], dialect: Dialect) -> str:
    """SQL for the checksum (binary, CHECKSUM_BYTES): the four lanes, each 4 bytes big-endian."""
    if dialect == "spark":
        padded = [f"lpad(hex({lane}), 8, '0')" for lane in lanes]
        return f"unhex(concat({', '.join(padded)}))"
    return f"unhex(printf('%08x%08x%08x%08x', {', '.join(lanes)}))"


def lanes_checksum_sql(lane_lists: list[str], dialect: Dialect) -> str:
    """SQL for the checksum from four list columns (BIGINT): each row's lane values, lane by lane."""
    return combine_sql([lane_fold_sql(values, k, dialect) for k, values in enumerate(lane_lists)], dialect)


def checksum_sql(schema: pa.Schema, columns: list[str], dialect: Dialect) -> str:
    """SQL for the checksum (binary, CHECKSUM_BYTES) of the sequence held in list columns `columns`
    (one per field of `schema`, in order, all of one length). One expression, for checking a table
    in SQL; a pipeline computes `row_lanes_sql` per row first and folds those."""
    if dialect == "spark":
        zipped = f"arrays_zip({', '.join(columns)})"
        lanes = row_lanes_sql(schema, [f"r.{c}" for c in columns], dialect)
        lists = [f"transform({zipped}, r -> {lane})" for lane in lanes]
    else:
        lanes = row_lanes_sql(schema, [f"{c}[i]" for c in columns], dialect)
        lists = [f"list_transform(range(1, len({columns[0]}) + 1), lambda i: {lane})" for lane in lanes]
    return lanes_checksum_sql(lists, dialect)
