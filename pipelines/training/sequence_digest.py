"""The sequence checksum, computed set-wise from list columns in DuckDB and in Spark SQL.

Every row of a sequence becomes a text (each model column's token followed by `|`, the row closed
by a newline) and the row's digest is the first 8 bytes of that text's SHA-256: computed once per
row, however many sequences hold it. The checksum combines the rows' digests by position in
integer arithmetic (four polynomial hashes modulo 2^31 - 1, 16 bytes in all).
Tokens: `~` for null; integers in decimal; timestamps as microseconds since the epoch in decimal;
booleans `t` / `f`; strings as `<UTF-8 byte length>:<bytes>`; floating point values exactly, as
`[-]<significand>p<exponent>` with the integer significand in [2^52, 2^53) (value = significand *
2^(exponent - 52)), `0` for both zeros, `nan`, `inf`, `-inf`. tableformat/SPEC.md ("Sequence
checksum") is the normative text, with test vectors.

Both dialects build the same text and fold with built-in functions only, so capture (DuckDB over Arrow),
the in-process reconstruction (DuckDB) and the Spark reconstruction agree byte for byte.
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

from seqlake.duckdb_session import connect

Dialect = Literal["duckdb", "spark"]
CHECKSUM_BYTES = 16  # 128 bits: a light pointer, still collision-safe
MAX_DOUBLE = "1.7976931348623157E308"


def _float_token(v: str, dialect: Dialect) -> str:
    """The exact token of a float: significand and binary exponent (both engines compute log2 with
    their own libm; the exponent is corrected so 1 <= |v| / 2^e < 2 holds exactly)."""
    text = "string" if dialect == "spark" else "VARCHAR"
    a = f"abs(CAST({v} AS DOUBLE))"
    e0 = f"CAST(floor(log2({a})) AS BIGINT)"
    e = f"({e0} + CASE WHEN {a} >= power(2.0, {e0} + 1) THEN 1 WHEN {a} < power(2.0, {e0}) THEN -1 ELSE 0 END)"
    # |v| * 2^(52 - e) in two exact steps (neither factor overflows, even for subnormal doubles).
    k1 = f"CAST(floor((52 - {e}) / 2) AS BIGINT)"
    significand = f"CAST({a} * power(2.0, {k1}) * power(2.0, 52 - {e} - {k1}) AS BIGINT)"
    sign = f"CASE WHEN {v} < 0 THEN '-' ELSE '' END"
    return (
        f"CASE WHEN {v} IS NULL THEN '~' WHEN isnan({v}) THEN 'nan' WHEN {v} = 0 THEN '0' "
        f"WHEN {a} > {MAX_DOUBLE} THEN concat({sign}, 'inf') "
        f"ELSE concat({sign}, CAST({significand} AS {text}), 'p', CAST({e} AS {text})) END"
    )


def value_token(v: str, kind: pa.DataType, dialect: Dialect) -> str:
    """SQL for the token of value expression `v` of Arrow type `kind`."""
    text = "string" if dialect == "spark" else "VARCHAR"
    if pa.types.is_floating(kind):
        return _float_token(v, dialect)
    if pa.types.is_timestamp(kind):
        micros = f"unix_micros({v})" if dialect == "spark" else f"epoch_us({v})"
        token = f"CAST({micros} AS {text})"
    elif pa.types.is_boolean(kind):
        token = f"CASE WHEN {v} THEN 't' ELSE 'f' END"
    elif pa.types.is_integer(kind):
        token = f"CAST({v} AS {text})"
    elif pa.types.is_string(kind):
        size = f"octet_length({v})" if dialect == "spark" else f"strlen({v})"
        token = f"concat(CAST({size} AS {text}), ':', {v})"
    else:
        raise TypeError(f"no sequence checksum token for {kind}")
    return f"CASE WHEN {v} IS NULL THEN '~' ELSE {token} END"


def _fields(tokens: list[str]) -> str:
    return ", ".join(f"{t}, '|'" for t in tokens)


def row_text_sql(schema: pa.Schema, columns: list[str], dialect: Dialect) -> str:
    """SQL for the text of one row whose values are the scalar expressions `columns`."""
    parts = [value_token(c, f.type, dialect) for c, f in zip(columns, schema, strict=True)]
    newline = "'\\n'" if dialect == "spark" else "chr(10)"
    return f"concat({_fields(parts)}, {newline})"


# The combination: four lanes, each a polynomial hash modulo the prime 2^31 - 1 (Horner's rule,
# starting at 1) over one 16-bit piece of each row's digest, with a primitive root as base. Every
# intermediate value stays below 2^62, so no engine overflows (DuckDB raises, Spark ANSI raises).
MODULUS = 2**31 - 1
BASES = (2037298730, 1757586490, 1092327019, 1665092365)
ROW_DIGEST_HEX = 16  # a row's digest: the first 8 bytes of the SHA-256 of its text, in hex


def row_digest_sql(text: str, dialect: Dialect) -> str:
    """SQL for a row's digest (lowercase hex, ROW_DIGEST_HEX characters) from its text."""
    if dialect == "spark":
        return f"substring(sha2({text}, 256), 1, {ROW_DIGEST_HEX})"
    return f"sha256({text})[1:{ROW_DIGEST_HEX}]"


def piece_sql(digest: str, lane: int, dialect: Dialect) -> str:
    """SQL for the 16-bit piece `lane` (0..3, big-endian) of a row digest in hex."""
    hex4 = f"substring({digest}, {4 * lane + 1}, 4)"
    if dialect == "spark":
        return f"CAST(conv({hex4}, 16, 10) AS BIGINT)"
    return f"CAST(concat('0x', {hex4}) AS BIGINT)"


def lane_sql(pieces: str, lane: int, dialect: Dialect) -> str:
    """SQL for lane `lane` of a sequence from the list (BIGINT) of its rows' pieces for that lane."""
    step = f"(a * {BASES[lane]} + x) % {MODULUS}"
    if dialect == "spark":
        return f"aggregate({pieces}, CAST(1 AS BIGINT), (a, x) -> {step})"
    return f"list_reduce({pieces}, lambda a, x: {step}, CAST(1 AS BIGINT))"


def combine_sql(lanes: list[str], dialect: Dialect) -> str:
    """SQL for the checksum (binary, CHECKSUM_BYTES): the four lanes, each 4 bytes big-endian."""
    if dialect == "spark":
        padded = [f"lpad(hex({lane}), 8, '0')" for lane in lanes]
        return f"unhex(concat({', '.join(padded)}))"
    return f"unhex(printf('%08x%08x%08x%08x', {', '.join(lanes)}))"


def pieces_checksum_sql(piece_lists: list[str], dialect: Dialect) -> str:
    """SQL for the checksum from four list columns (BIGINT): each row's pieces, lane by lane."""
    return combine_sql([lane_sql(p, k, dialect) for k, p in enumerate(piece_lists)], dialect)


def row_digests_sql(schema: pa.Schema, columns: list[str], dialect: Dialect) -> str:
    """SQL for the list of row digests (hex) of a sequence held in list columns `columns` (one per
    field of `schema`, in order, all of one length)."""
    if dialect == "spark":
        # arrays_zip names each struct field after its input column.
        zipped = f"arrays_zip({', '.join(columns)})"
        parts = [value_token(f"r.{c}", f.type, dialect) for c, f in zip(columns, schema, strict=True)]
        row = row_digest_sql(f"concat({_fields(parts)}, '\\n')", dialect)
        return f"transform({zipped}, r -> {row})"
    parts = [value_token(f"{c}[i]", f.type, dialect) for c, f in zip(columns, schema, strict=True)]
    row = row_digest_sql(f"concat({_fields(parts)}, chr(10))", dialect)
    return f"list_transform(range(1, len({columns[0]}) + 1), lambda i: {row})"


def digests_checksum_sql(digests: str, dialect: Dialect) -> str:
    """SQL for the checksum from a list of row digests (hex)."""
    transform = "transform" if dialect == "spark" else "list_transform"
    arrow = "d ->" if dialect == "spark" else "lambda d:"
    lists = [f"{transform}({digests}, {arrow} {piece_sql('d', k, dialect)})" for k in range(4)]
    return pieces_checksum_sql(lists, dialect)


def checksum_sql(schema: pa.Schema, columns: list[str], dialect: Dialect) -> str:
    """SQL for the checksum (binary, CHECKSUM_BYTES) of the sequence held in list columns `columns`
    (one expression; it names the row digests once per lane, so where a query can, it computes
    `row_digests_sql` as a column first and applies `digests_checksum_sql` to it)."""
    return digests_checksum_sql(row_digests_sql(schema, columns, dialect), dialect)


def sequence_checksums(sequences: pa.Table, schema: pa.Schema, prefix: str) -> pa.Array:
    """The checksum of every sequence of a table of list columns `<prefix><field>` (DuckDB over Arrow)."""
    columns = [f"{prefix}{f.name}" for f in schema]
    with connect(extensions=()) as con:
        con.register("_sequences", sequences.select(columns))
        quoted = [f'"{c}"' for c in columns]
        digests = f"SELECT {row_digests_sql(schema, quoted, 'duckdb')} AS _d FROM _sequences"
        result = con.execute(f"SELECT {digests_checksum_sql('_d', 'duckdb')} FROM ({digests})").to_arrow_table()
    return result.column(0).combine_chunks().cast(pa.binary())
