"""Import users' own event data: files (Parquet, CSV, JSON lines, `::`-style .dat) and Delta/Iceberg tables.

The seam: user files (`import_file`) or external tables (`consume_external_table`), mapped by an
`ImportMapping` (`load_mapping`), become raw source records (``events.RAW_SCHEMA``): one JSON payload
per event, exactly what the standard ingest path validates, quarantines and lands. Nothing downstream
knows the data was imported.

- `mapping`: the mapping model, loading it from YAML and checking it against the configuration;
- `payloads`: a source row -> its event payload (typed values, event id, source partition), the
  reference the set-based mapping is held to;
- `payloads_sql`: a batch of source rows -> payloads, one DuckDB statement;
- `ids`: event id schemes (the hash of an event that carries no id);
- `lines`: a text file as blocks of whole lines, the lines that cannot be read as text taken out;
- `files`: one file, read in batches, mapped and put in arrival order with dense LSNs;
- `commit`: an import's records, written to the raw table's files as they come, in one commit;
- `external`: a Delta or Iceberg table, commit by commit, with LSNs ``version << 32 | position``.
"""

from seqlake.core.errors import ImportDataError
from seqlake.pipelines.importers.external import consume_external_table
from seqlake.pipelines.importers.files import ImportStats, import_file
from seqlake.pipelines.importers.mapping import (
    ColumnMapping,
    ExplodeSpec,
    ImportMapping,
    load_mapping,
    mapping_digest,
    parse_mapping,
    resolve_mapping_path,
)

__all__ = [
    "ColumnMapping",
    "ExplodeSpec",
    "ImportDataError",
    "ImportMapping",
    "ImportStats",
    "consume_external_table",
    "import_file",
    "load_mapping",
    "mapping_digest",
    "parse_mapping",
    "resolve_mapping_path",
]
