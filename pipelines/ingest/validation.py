"""Payload validation as SQL, one pass over raw records: the rules of `seqlake.core.payload`, set-based.

`validation_sql` turns raw records (RAW_SCHEMA) into the rows of `parsed_schema`: typed columns for a
valid payload, else `reason` and the raw `payload`. It has two parts:

- the *facts* of each payload, which only a JSON reader can tell: whether it is strict JSON within the
  limits, its keys, and for each known key its JSON kind (`_k_<key>`: the code of the value's first
  character as JSON writes it, `_n_<key>`: a number written as an integer) and its text (`_v_<key>`,
  a string decoded). The engines' readers differ (DuckDB reads NaN and trailing commas, rejects lone
  surrogates; Spark's reader takes lone surrogates as `?`, ignores what follows the object and reads
  a key twice only when told to, see `seqlake.pipelines.ingest.spark.duplicate_keys_read`), so each
  engine's facts are written for it, side by side below (`_duckdb_facts`, `_spark_facts`);
- the *rules* on those facts: every quarantine reason as one CASE in the reference's order, and the
  typed columns, written once (DuckDB's dialect) and transpiled to Spark with sqlglot.

What both engines' facts share:
- a payload that spells a surrogate escape (`\\ud800`) is read from a repaired copy: escaped
  backslashes respelled `\\u005C`, surrogate pairs kept, each lone surrogate `\\uDxyz` turned into
  `\\uExyz`. A second copy turns it into `\\uFxyz`: a string that differs between the two held a lone
  surrogate (`invalid_utf8`), and keys are compared as pairs (`duplicate_key`), so no real character
  is ever mistaken for a repaired one;
- what JSON forbids but a reader accepts, and the limits a reader does not keep, are checked on the
  payload with its strings blanked out, only for payloads a cheap pattern says can hold them (a
  second bracket, a NaN or Infinity, a comma before a closing bracket, a long run of number
  characters): NaN and Infinity, trailing commas, text after the object, numbers longer than
  `MAX_NUMBER_CHARS`, nesting deeper than `MAX_NESTING_DEPTH` (innermost bracket pairs removed that
  many times must leave none), keys longer than `MAX_KEY_UTF16_UNITS`.
"""

from __future__ import annotations

import functools
from typing import Literal

import sqlglot
from sqlglot import exp

from seqlake.core.config import Config
from seqlake.core.events import PAYLOAD_KEYS
from seqlake.core.payload import (
    INT_RANGES,
    MAX_KEY_UTF16_UNITS,
    MAX_NESTING_DEPTH,
    MAX_NUMBER_CHARS,
    MAX_PAYLOAD_BYTES,
    UNREADABLE_LINE_KEY,
)
from seqlake.pipelines.compaction.aggregation import SPARK_TYPES
from seqlake.pipelines.ingest import tombstones as forget_tombstones
from seqlake.pipelines.ingest.plan import home_window_sql
from seqlake.pipelines.landing.schema import landing_schema, parsed_schema

Dialect = Literal["duckdb", "spark"]

# The keys whose kind and value the rules read, in this order.
_FIXED_KEYS = (*PAYLOAD_KEYS, UNREADABLE_LINE_KEY)
_FLOAT_LIMITS = {"float32": "3.4028234663852886e38", "float64": "1.7976931348623157e308"}
# The one function the rules call that the engines spell differently (see `_engine_functions`).
_TIMESTAMP_US = "seqlake_timestamp_us"
_TIMESTAMP_FUNCTIONS = {"duckdb": "make_timestamptz", "spark": "timestamp_micros"}

# JSON's whitespace, and a string literal (escapes included) as RE2 and Java read it.
_WS = r"[ \t\n\r]"
_STRING = r'"(?:[^"\\]|\\.)*"'
_NUMBER_RUN = f"[-+.0-9eE]{{{MAX_NUMBER_CHARS}}}[-+.0-9eE]"  # a number longer than the limit (RE2: <= 1000)


def _keys(config: Config) -> tuple[str, ...]:
    return (*_FIXED_KEYS, *config.column_types())


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _string_keys(config: Config) -> tuple[str, ...]:
    """The keys whose string value the rules read: its characters, its length, a lone surrogate."""
    strings = [c for c, kind in config.column_types().items() if kind == "string"]
    return ("event_id", "feature_group", UNREADABLE_LINE_KEY, *strings)


def _integer_keys(config: Config) -> tuple[str, ...]:
    """The keys whose value the rules need to be written as an integer."""
    return ("user_id", "event_ts", *(c for c, kind in config.column_types().items() if kind in INT_RANGES))


def _event_keys(config: Config, group: str) -> str:
    """The keys a payload of `group` may hold, as SQL string literals."""
    return ", ".join(map(_literal, (*PAYLOAD_KEYS, *config.feature_groups[group].columns)))


def _in(values: list[str] | tuple[str, ...]) -> str:
    return "(" + ", ".join(_literal(v) for v in values) + ")"


def _peeled(brackets: str) -> str:
    """`brackets` (a string of `[` and `]`) with the innermost pairs removed MAX_NESTING_DEPTH times:
    empty exactly when they nest at most that deep."""
    text = brackets
    for _ in range(MAX_NESTING_DEPTH):
        text = f"regexp_replace({text}, '\\[\\]', '', 'g')"
    return text


# -- facts: DuckDB ---------------------------------------------------------------------------------


def _duckdb_repair(text: str, lone: str) -> str:
    """`text` (escaped backslashes already respelled) with each lone surrogate escape `\\uDxyz` as
    `\\u<lone>xyz`, pairs kept; NULL when `text` holds an escape JSON does not have (`\\z`)."""
    marked = f"regexp_replace({text}, '\\\\u([dD][89a-fA-F][0-9a-fA-F]{{2}})', '\\\\z\\1', 'g')"
    paired = (
        f"regexp_replace({marked}, '\\\\z([dD][89abAB][0-9a-fA-F]{{2}})\\\\z([dD][c-fC-F][0-9a-fA-F]{{2}})', "
        "'\\\\u\\1\\\\u\\2', 'g')"
    )
    lone_sql = f"regexp_replace({paired}, '\\\\z[dD]([0-9a-fA-F]{{3}})', '\\\\u{lone}\\1', 'g')"
    return f"CASE WHEN NOT contains({text}, '\\z') THEN {lone_sql} END"


# What DuckDB's reader accepts and JSON does not, and what its limits do not cover, can only be in a
# payload this matches (a pattern may also match inside a string: the exact checks run then):
# a second bracket (a nested value), a NaN or Infinity spelled as DuckDB reads them, a comma before a
# closing bracket.
_SUSPECT = f"\\{{[^\\[{{]*[\\[{{]|[:,\\[]{_WS}*-?[NnIi][AaNn][NnFf]|,{_WS}*[\\]}}]"


def _duckdb_facts(config: Config, source: str) -> str:
    keys = _keys(config)
    paths = "[" + ", ".join(f"'$.{k}'" for k in keys) + "]"
    groups = config.feature_groups
    suspect = (
        f"regexp_matches(_doc, '{_SUSPECT}')"
        f" OR (strlen(_doc) > {MAX_NUMBER_CHARS} AND regexp_matches(_doc, '{_NUMBER_RUN}'))"
        f" OR strlen(_doc) > {MAX_KEY_UTF16_UNITS}"
    )
    brackets = "translate(regexp_replace(_blanked, '[^\\[\\]{}]', '', 'g'), '{}', '[]')"
    # Keys at every level: the string literals followed by a colon (a global match stays aligned on them).
    written_keys = f"list_filter(regexp_extract_all(_doc, '{_STRING}{_WS}*:?'), k -> ends_with(k, ':'))"
    key = "json_extract_string(rtrim(k, ':'), '$')"
    utf16 = f"length({key}) + length(regexp_replace({key}, '[^\\x{{10000}}-\\x{{10FFFF}}]', '', 'g'))"
    long_key = (
        f"CASE WHEN strlen(_doc) > {MAX_KEY_UTF16_UNITS}"
        f" THEN coalesce(list_bool_or(list_transform({written_keys}, k -> {utf16} > {MAX_KEY_UTF16_UNITS})), false)"
        " ELSE false END"
    )
    strict = (
        "NOT regexp_matches(regexp_replace(_blanked, 'true|false|null', '', 'g'), '[a-df-zA-DF-Z]')"
        f" AND NOT regexp_matches(_blanked, ',{_WS}*[\\]}}]')"
        f" AND NOT regexp_matches(_blanked, '{_NUMBER_RUN}')"
        f" AND {_peeled(brackets)} = ''"
        f" AND NOT {long_key}"
    )
    kinds, values, lone = [], [], []
    for i, key in enumerate(keys, start=1):
        x = f"_x[{i}]"  # the value as DuckDB writes it: JSON text
        kinds.append(f"ascii({x}) AS _k_{key}")
        if key in _integer_keys(config):  # DuckDB writes every float with a point or an exponent
            kinds.append(f"NOT (contains({x}, '.') OR contains({x}, 'e') OR contains({x}, 'E')) AS _n_{key}")
        if key not in _string_keys(config):  # a number's or a literal's text; a string here is wrong_type
            values.append(f"{x} AS _v_{key}")
            continue
        # A string written without an escape is its text between the quotes.
        decoded = (
            f"CASE WHEN contains({x}, '\\') THEN json_extract_string({x}, '$') ELSE substr({x}, 2, length({x}) - 2) END"
        )
        values.append(f"CASE WHEN left({x}, 1) = '\"' THEN {decoded} ELSE {x} END AS _v_{key}")
        lone.append(f"CASE WHEN _repair THEN coalesce({x} <> _xf[{i}], false) ELSE false END AS _u_{key}")
    allowed = " ".join(f"WHEN {_literal(g)} THEN NOT list_has_all([{_event_keys(config, g)}], _keys)" for g in groups)
    n = config.layout.window_seconds * 1000
    return f"""
    SELECT *, {", ".join(kinds)}, {", ".join(values)}, {", ".join(lone)},
      coalesce(CASE _v_feature_group {allowed} END, false) AS _unknown_key
    FROM (
      SELECT *,
        CASE WHEN NOT _object THEN false WHEN _blanked IS NULL THEN true ELSE {strict} END AS _syntax,
        CASE WHEN _repair THEN list_unique(list_zip(_keys, _keys_f)) ELSE list_unique(_keys) END
          < len(_keys) AS _dup,
        len(_keys) AS _nkeys,
        CASE WHEN _object THEN CAST(json_extract(_doc, {paths}) AS VARCHAR[]) END AS _x,
        CASE WHEN _object AND _repair THEN CAST(json_extract(_doc_f, {paths}) AS VARCHAR[]) END AS _xf
      FROM (
        SELECT *,
          CASE WHEN _object THEN json_keys(_doc) END AS _keys,
          CASE WHEN _object AND _repair THEN json_keys(_doc_f) END AS _keys_f,
          CASE WHEN _object AND ({suspect}) THEN regexp_replace(_doc, '{_STRING}', '""', 'g') END AS _blanked
        FROM (
          SELECT *, coalesce(NOT _oversize AND json_valid(_doc) AND starts_with(ltrim(_doc, ' \t\n\r'), '{{'), false)
            AS _object
          FROM (
            SELECT *,
              CASE WHEN _repair THEN {_duckdb_repair("_respelled", "E")} ELSE payload END AS _doc,
              CASE WHEN _repair THEN {_duckdb_repair("_respelled", "F")} END AS _doc_f
            FROM (
              SELECT source_partition, lsn, arrival_ts, payload,
                strlen(payload) > {MAX_PAYLOAD_BYTES} AS _oversize,
                contains(payload, '\\ud') OR contains(payload, '\\uD') AS _repair,
                CASE WHEN contains(payload, '\\ud') OR contains(payload, '\\uD')
                  THEN regexp_replace(payload, '\\\\\\\\', '\\\\u005C', 'g') END AS _respelled,
                (epoch_ms(arrival_ts) - ((epoch_ms(arrival_ts) % {n}) + {n}) % {n}) // {n} AS _window
              FROM {source}
            )
          )
        )
      )
    )"""


# -- facts: Spark ----------------------------------------------------------------------------------
# Spark reads each payload once, with from_json into a struct of the known keys, each read as text:
# a string's text is its characters, any other value's text the JSON Jackson writes for it (`1e2` is
# `100.0`, `-0` is `0`, `1e400` is `"Infinity"` with its quotes, an object is its compact JSON). So a
# text tells its value's JSON kind unless a string reads like a number, `true`, `false` or JSON; the
# payload's quotes, counted, rule that out (see `_spark_facts`). Jackson keeps strict JSON when told
# (no NaN, no single quotes) and the number, nesting and key limits itself, but ignores what follows
# the first value and reads a lone surrogate as `?`: the repaired copies and the checks on the blanked
# text cover both.

# A string literal for Java's regular expressions: possessive, so a long string never deepens the stack.
_JAVA_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_UNREAD = "seqlake_unread"  # the struct's field for the text of a payload Jackson could not read


def _spark_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Java's spelling of the repair (see the module docstring) and of the checks, as Spark literals.
_J_MARK = _spark_literal(r"\\u([dD][89a-fA-F][0-9a-fA-F]{2})"), _spark_literal(r"\\z$1")
_J_PAIR = (
    _spark_literal(r"\\z([dD][89abAB][0-9a-fA-F]{2})\\z([dD][c-fC-F][0-9a-fA-F]{2})"),
    _spark_literal(r"\\u$1\\u$2"),
)
_J_LONE = _spark_literal(r"\\z[dD]([0-9a-fA-F]{3})")
_J_MARKER = _spark_literal(r"\z")
_J_ESCAPES = _spark_literal(r"\ud"), _spark_literal(r"\uD")
# Escaped backslashes respelled, so that no `\\ud...` is taken for a surrogate escape.
_RESPELLED = "regexp_replace(payload, {}, {})".format(_spark_literal(r"\\\\"), _spark_literal(r"\\u005C"))
_J_NOT_MARK = _spark_literal(r'[^\[\]{}:"]+')  # all but brackets, colons and quotes
_J_SECOND_BRACKET = _spark_literal(r"[\[\]]|\{.*\{|\}.*\}")
_J_NUMBER_RUN = _spark_literal(_NUMBER_RUN)
_J_NOT_BRACKET = _spark_literal(r"[^\[\]{}]")
_J_PAIR_OF_BRACKETS = _spark_literal(r"\[\]")
_J_WS = _spark_literal(" \t\n\r")
# A number as Jackson writes it (digits, or a double as Java writes it).
_J_NUMBER = _spark_literal(r"^-?[0-9]+(\.[0-9]+)?(E-?[0-9]+)?$")
_J_OPTIONS = "'allowNonNumericNumbers', 'false', 'allowSingleQuotes', 'false'"


def _spark_repair(text: str, lone: str) -> str:
    marked = f"regexp_replace({text}, {_J_MARK[0]}, {_J_MARK[1]})"
    paired = f"regexp_replace({marked}, {_J_PAIR[0]}, {_J_PAIR[1]})"
    lone_sql = f"regexp_replace({paired}, {_J_LONE}, {_spark_literal(chr(92) * 2 + 'u' + lone + '$1')})"
    return f"CASE WHEN NOT contains({text}, {_J_MARKER}) THEN {lone_sql} END"


def _spark_read(doc: str, keys: tuple[str, ...]) -> str:
    """`doc` read by from_json: each of `keys` as text, and `_UNREAD` the text of a payload it could not read."""
    fields = ", ".join(f"`{key}`: string" for key in (*keys, _UNREAD))
    options = f"map({_J_OPTIONS}, 'columnNameOfCorruptRecord', {_literal(_UNREAD)})"
    return f"from_json({doc}, 'struct<{fields}>', {options})"


def _count(text: str, character: str) -> str:
    return f"(octet_length({text}) - octet_length(replace({text}, {_literal(character)}, '')))"


def _apparent_kind(config: Config, key: str) -> str:
    """The code of `key`'s JSON kind (as `_is` reads it) as its text tells it: exact unless a string
    reads like another kind, which the quotes' count rules out (`_spark_facts`). A string key's text
    that starts like a number is tested in full (an event id may start with a digit); any other key's
    is taken for a number, and the count says when it was not."""
    text = f"_s.`{key}`"
    number = f"CASE WHEN {text} RLIKE {_J_NUMBER} THEN 48 ELSE 34 END" if key in _string_keys(config) else "48"
    return (
        f"CASE WHEN {text} IS NULL THEN NULL WHEN {text} = 'true' THEN {ord('t')} WHEN {text} = 'false' THEN {ord('f')}"
        f" WHEN startswith({text}, '{{') OR startswith({text}, '[') THEN {ord('{')}"
        f" WHEN startswith({text}, '\"') THEN {ord('0')}"  # a number beyond a double, written quoted
        f" WHEN startswith({text}, '-') OR ({text} >= '0' AND {text} < ':') THEN {number}"
        f" ELSE {ord(chr(34))} END"
    )


def _spark_facts(config: Config, source: str) -> str:
    """The facts from one from_json of each payload (`_s`, the known keys' texts `_v_<key>`).

    Each key and each string value of a payload is two quotes in its text, and a flat payload has a
    colon per key. So when the payload's colons are as many as the known keys with a value, and its
    quotes twice as many as those keys and the values whose text reads as a string (`_fast`), the
    payload holds only known keys, once each, and no string that reads like another kind: the texts
    tell every kind, and the key count is the payload's. Any other payload (a key twice, an unknown or
    null-valued key, a colon or an escaped quote in a string, a numeric string) is read again, as a
    map of all its keys (`_m`) and as a variant (`_p`, whose types say which values are strings)."""
    keys = _keys(config)
    groups = config.feature_groups
    brackets = f"translate(regexp_replace(_blanked, {_J_NOT_BRACKET}, ''), '{{}}', '[]')"
    # One object, nested at most MAX_NESTING_DEPTH deep: inside its outer brackets, balanced brackets.
    peeled = f"substring({brackets}, 2, length({brackets}) - 2)"
    for _ in range(MAX_NESTING_DEPTH - 1):
        peeled = f"regexp_replace({peeled}, {_J_PAIR_OF_BRACKETS}, '')"
    strict = f"NOT _blanked RLIKE {_J_NUMBER_RUN} AND {peeled} = ''"
    # Only a payload with a bracket beyond its object's two, or a long run of number characters, can
    # break what Jackson does not check (nesting, a second value, long numbers): the exact checks run
    # then. `_marks` holds the payload's brackets, colons and quotes, in order.
    suspect = (
        f"_marks RLIKE {_J_SECOND_BRACKET} OR (octet_length(_doc) > {MAX_NUMBER_CHARS} AND _doc RLIKE {_J_NUMBER_RUN})"
    )
    present = " + ".join(f"CASE WHEN _s.`{key}` IS NULL THEN 0 ELSE 1 END" for key in keys)
    strings = " + ".join(f"CASE WHEN _a_{key} = {ord(chr(34))} THEN 1 ELSE 0 END" for key in keys)
    # from_json read an object (a top-level array or scalar is no object, whatever from_json makes of it).
    read = f"_s IS NOT NULL AND _s.{_UNREAD} IS NULL AND startswith(_marks, '{{')"
    counted = f"{_count('_marks', ':')} = _known AND {_count('_marks', chr(34))} = 2 * (_known + {strings})"
    texts = [f"_s.`{key}` AS _v_{key}" for key in keys]
    texts += [f"_s_f.`{key}` AS _f_{key}" for key in _string_keys(config)]
    texts += [f"{_apparent_kind(config, key)} AS _a_{key}" for key in keys]
    facts = []
    for key in keys:
        text = f"_v_{key}"
        is_string = f"schema_of_variant(variant_get(_p, {_literal('$.' + key)})) = 'STRING'"
        facts.append(f"CASE WHEN NOT _fast AND {is_string} THEN {ord(chr(34))} ELSE _a_{key} END AS _k_{key}")
        if key in _integer_keys(config):  # a number Jackson writes without a point or an exponent
            written = f"contains({text}, '.') OR contains({text}, 'E') OR startswith({text}, '\"')"
            facts.append(f"NOT ({written}) AS _n_{key}")
        if key in _string_keys(config):
            facts.append(f"coalesce(_repair AND {text} IS DISTINCT FROM _f_{key}, false) AS _u_{key}")

    def given(group: str) -> str:
        named = (*PAYLOAD_KEYS, *config.feature_groups[group].columns)
        return " + ".join(f"CASE WHEN _v_{key} IS NULL THEN 0 ELSE 1 END" for key in named)

    unknown = " ".join(
        f"WHEN {_literal(g)} THEN CASE WHEN _fast THEN _known > {given(g)}"
        f" ELSE size(array_except(map_keys(_m), array({_event_keys(config, g)}))) > 0 END"
        for g in groups
    )
    # A key given twice, among all of them: keys with a lone surrogate compared as pairs of their copies.
    duplicate = (
        "CASE WHEN _repair THEN size(array_distinct(arrays_zip(map_keys(_m), map_keys(_m_f))))"
        " ELSE size(array_distinct(map_keys(_m))) END < size(_m)"
    )
    is_object = "(_fast OR coalesce(_m IS NOT NULL AND startswith(_marks, '{'), false))"
    ends_object = f"(endswith(_doc, '}}') OR endswith(TRIM(TRAILING {_J_WS} FROM _doc), '}}'))"
    repair = f"contains(payload, '\\\\') AND (contains(payload, {_J_ESCAPES[0]}) OR contains(payload, {_J_ESCAPES[1]}))"
    n = config.layout.window_seconds * 1000
    return f"""
    SELECT source_partition, lsn, arrival_ts, payload, _window, {", ".join(facts)},
      coalesce(CASE _v_feature_group {unknown} END, false) AS _unknown_key,
      {is_object} AND {ends_object} AND (_blanked IS NULL OR ({strict})) AS _syntax,
      CASE WHEN _fast THEN false WHEN {is_object} THEN {duplicate} END AS _dup,
      CASE WHEN _fast THEN _known ELSE size(_m) END AS _nkeys,
      _oversize, _v_{", _v_".join(keys)}
    FROM (
      SELECT *,
        CASE WHEN NOT _fast AND NOT _oversize THEN from_json(_doc, 'map<string, string>', map({_J_OPTIONS})) END
          AS _m,
        CASE WHEN NOT _fast AND NOT _oversize AND _repair
          THEN from_json(_doc_f, 'map<string, string>', map({_J_OPTIONS})) END AS _m_f,
        CASE WHEN NOT _fast AND NOT _oversize THEN try_parse_json(_doc) END AS _p,
        CASE WHEN NOT _oversize AND ({suspect}) THEN regexp_replace(_doc, {_spark_literal(_JAVA_STRING)}, '""') END
          AS _blanked
      FROM (
        SELECT *, coalesce(_read AND {counted}, false) AS _fast
        FROM (
          SELECT source_partition, lsn, arrival_ts, payload, _oversize, _repair, _window, _doc, _doc_f, _marks,
            {", ".join(texts)}, coalesce({read}, false) AS _read, {present} AS _known
          FROM (
            SELECT *,
              CASE WHEN NOT _oversize THEN {_spark_read("_doc", keys)} END AS _s,
              CASE WHEN NOT _oversize AND _repair THEN {_spark_read("_doc_f", _string_keys(config))} END AS _s_f,
              CASE WHEN NOT _oversize THEN regexp_replace(_doc, {_J_NOT_MARK}, '') END AS _marks
            FROM (
              SELECT source_partition, lsn, arrival_ts, payload,
                octet_length(payload) > {MAX_PAYLOAD_BYTES} AS _oversize,
                {repair} AS _repair,
                CASE WHEN {repair} THEN {_spark_repair(_RESPELLED, "E")} ELSE payload END AS _doc,
                CASE WHEN {repair} THEN {_spark_repair(_RESPELLED, "F")} END AS _doc_f,
                (unix_millis(arrival_ts) - pmod(unix_millis(arrival_ts), {n})) div {n} AS _window
              FROM {source}
            )
          )
        )
      )
    )"""


# -- the rules on the facts (DuckDB's dialect; transpiled for Spark) ---------------------------------


def _is(key: str, kind: str) -> str:
    """The value of `key` is of this JSON `kind`: from `_k_<key>`, the code of its first character as
    JSON writes it (NULL when absent), and `_n_<key>`, whether a number is written as an integer."""
    code = f"_k_{key}"
    if kind == "null":
        return f"coalesce({code}, {ord('n')}) = {ord('n')}"
    tests = {
        "string": f"{code} = {ord(chr(34))}",
        "bool": f"{code} IN ({ord('f')}, {ord('t')})",
        "number": f"({code} = {ord('-')} OR {code} BETWEEN {ord('0')} AND {ord('9')})",
    }
    if kind == "int":
        return f"coalesce({tests['number']} AND _n_{key}, false)"
    return f"coalesce({tests[kind]}, false)"


def _fits(value: str, low: int, high: int) -> str:
    """The integer written as `value` lies in low..high, ranges of 64 bits: digits that do not fit
    BIGINT do not fit them."""
    return f"coalesce(TRY_CAST({value} AS BIGINT) BETWEEN {low} AND {high}, false)"


def _well_typed(column: str, kind: str) -> str:
    """The present value of `column` has the declared `kind` and fits it."""
    if kind in INT_RANGES:
        return f"({_is(column, 'int')} AND {_fits(f'_v_{column}', *INT_RANGES[kind])})"
    if kind in _FLOAT_LIMITS:
        finite = f"coalesce(abs(TRY_CAST(_v_{column} AS DOUBLE)) <= {_FLOAT_LIMITS[kind]}, false)"
        return f"({_is(column, 'number')} AND {finite})"
    if kind == "bool":
        return _is(column, "bool")
    return _is(column, "string")


def _typed(column: str, kind: str) -> str:
    if kind in _FLOAT_LIMITS:
        return f"TRY_CAST(TRY_CAST(_v_{column} AS DOUBLE) AS {SPARK_TYPES[kind]})"
    if kind == "bool":
        return f"_v_{column} = 'true'"
    if kind == "string":
        return f"_v_{column}"
    return f"TRY_CAST(_v_{column} AS {SPARK_TYPES[kind]})"


def _owned_by(config: Config, column: str) -> str:
    owners = [g for g, spec in config.feature_groups.items() if column in spec.columns]
    return f"_v_feature_group IN {_in(owners)}"


def _reason(config: Config) -> str:
    types = config.column_types()
    groups = config.feature_groups
    events = config.events
    wrong = " OR ".join(
        f"({_owned_by(config, c)} AND NOT {_is(c, 'null')} AND NOT {_well_typed(c, kind)})" for c, kind in types.items()
    )
    strings = [c for c, kind in types.items() if kind == "string"]
    lone = " OR ".join(["_u_event_id", *(f"({_owned_by(config, c)} AND _u_{c})" for c in strings)])
    too_long = [
        f"(_v_feature_group = {_literal(g)} AND NOT {_is(c, 'null')} AND length(_v_{c}) > {spec.max_length})"
        for g, group in groups.items()
        for c, spec in group.columns.items()
        if spec.max_length is not None
    ]
    user_high = INT_RANGES["int64"][1]
    return f"""CASE
      WHEN _oversize THEN 'oversize_value'
      WHEN NOT coalesce(_syntax, false) THEN 'invalid_json'
      WHEN _dup THEN 'duplicate_key'
      WHEN _nkeys = 1 AND {_is(UNREADABLE_LINE_KEY, "string")} THEN 'unreadable_line'
      WHEN {_is("user_id", "null")} THEN 'missing_user_id'
      WHEN NOT ({_is("user_id", "int")} AND {_fits("_v_user_id", 0, user_high)}) THEN 'bad_user_id'
      WHEN NOT ({_is("feature_group", "string")} AND coalesce(_v_feature_group IN {_in(list(groups))}, false))
        THEN 'unknown_feature_group'
      WHEN {_is("event_ts", "null")} THEN 'missing_event_ts'
      WHEN NOT {_is("event_ts", "int")} THEN 'wrong_type'
      WHEN NOT {_fits("_v_event_ts", events.min_event_ms, events.max_event_ms)} THEN 'event_ts_out_of_range'
      WHEN NOT {_is("event_id", "string")} THEN 'wrong_type'
      WHEN {wrong or "false"} THEN 'wrong_type'
      WHEN {lone} THEN 'invalid_utf8'
      WHEN {" OR ".join(too_long) or "false"} THEN 'oversize_value'
      WHEN _unknown_key THEN 'unknown_column'
    END"""


_FACTS = "seqlake_payload_facts"  # where each engine's facts query goes into the rules' text
_HOME = "seqlake_home_window"  # where the home window of each record's window goes into it


def _rules(config: Config) -> str:
    """The landing columns of valid rows, `reason` and the payload of the others (parsed_schema's order)."""
    types = config.column_types()
    valid = "_reason IS NULL"
    bookkeeping = {
        "user_id": f"CASE WHEN {valid} THEN TRY_CAST(_v_user_id AS BIGINT) END",
        "feature_group": f"CASE WHEN {valid} THEN _v_feature_group END",
        "event_ts": f"CASE WHEN {valid} THEN {_TIMESTAMP_US}(TRY_CAST(_v_event_ts AS BIGINT) * 1000) END",
        "source_partition": "source_partition",
        "lsn": "lsn",
        "arrival_ts": "arrival_ts",
        "event_id": f"CASE WHEN {valid} THEN _v_event_id END",
        "window_id": _HOME,
    }
    columns = {c: f"CASE WHEN {valid} AND NOT {_is(c, 'null')} THEN {_typed(c, kind)} END" for c, kind in types.items()}
    outputs = {**bookkeeping, **columns}
    selected = [f"{outputs[name]} AS {name}" for name in landing_schema(config).names]
    selected += ["_reason AS reason", "CASE WHEN _reason IS NOT NULL THEN payload END AS payload"]
    return f"""
    SELECT {", ".join(selected)}
    FROM (SELECT *, {_reason(config)} AS _reason FROM {_FACTS})"""


def _engine_functions(dialect: Dialect):
    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == _TIMESTAMP_US:
            return exp.Anonymous(this=_TIMESTAMP_FUNCTIONS[dialect], expressions=node.expressions)
        return node

    return rename


@functools.lru_cache(maxsize=16)  # one configuration asks for the same text batch after batch
def _transpiled(rules: str, dialect: Dialect) -> str:
    tree = sqlglot.parse_one(rules, read="duckdb").transform(_engine_functions(dialect))
    return tree.sql(dialect=dialect, pretty=True)


def validation_sql(
    config: Config,
    source: str,
    dialect: Dialect,
    homes: dict[int, int] | None = None,
    tombstones: forget_tombstones.Tombstones | None = None,
) -> str:
    """Validate every raw record of the relation `source` (RAW_SCHEMA's columns): rows of
    `parsed_schema(config)`, typed when valid, else with `reason` and `payload`; a record that arrived
    in a published window is in its home window of `homes` (`seqlake.pipelines.ingest.plan.home_windows`).
    A record a forget's tombstone covers is left out (`seqlake.pipelines.ingest.tombstones`): those
    recorded now unless `tombstones` are given."""
    facts = _duckdb_facts(config, source) if dialect == "duckdb" else _spark_facts(config, source)
    rules = _transpiled(_rules(config), dialect).replace(_HOME, home_window_sql("_window", homes or {}), 1)
    validated = rules.replace(_FACTS, f"({facts}) AS _facts", 1)
    honoured = forget_tombstones.current(config) if tombstones is None else tombstones
    return honoured.anti_join_sql(validated, parsed_schema(config).names, dialect)
