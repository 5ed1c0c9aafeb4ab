-- catalog.sql: Iceberg and Delta metadata as relations, for the files that load after it (name order).
--
-- Reads metadata files and folder listings only, never a data file. Uses what `seqlake sql` defines
-- for each table the warehouse has: the variables <table>_metadata (Iceberg metadata file, pinned when
-- the session opened) and <table>_location (the table's root folder).
--
--   path_key(path)                    a path as manifests and listings both spell it
--   iceberg_files(metadata, location) data files of an Iceberg table: live or only on storage, rows, bytes
--   delta_files(location)             data files of a Delta table: live or only on storage, rows, bytes
--   iceberg_snapshot_log(metadata)    snapshots with their summaries (JSON)
--   iceberg_properties(metadata)      table properties
--   history_snapshots                 the history table's commits with seqlake's summary fields
--   history_runs                      the live sorted runs (table property seqlake.runs)
--   window_runs                       each published processing window and the live run holding it

-- `file:///x`, `file:/x` and `/x` are one file.
CREATE OR REPLACE MACRO path_key(path) AS regexp_replace(path, '^file:(//)?', '');

-- Every data file of an Iceberg table: the current snapshot's (live, with its row count) and the Parquet
-- files found under <location>/data that it does not reference (live = false: files of replaced runs
-- that older snapshots still reference, or orphans of failed writes). Sizes come from the listing.
CREATE OR REPLACE MACRO iceberg_files(metadata, location) AS TABLE
    WITH live AS (
        SELECT file_path, record_count FROM iceberg_metadata(metadata) WHERE manifest_content = 'DATA'
    ),
    listed AS (
        SELECT filename, size FROM read_blob(location || '/data/**/*.parquet')
    )
    SELECT
        coalesce(live.file_path, listed.filename) AS file_path,
        live.file_path IS NOT NULL AS live,
        live.record_count AS row_count,
        listed.size AS bytes
    FROM live
    FULL OUTER JOIN listed ON path_key(live.file_path) = path_key(listed.filename);

-- The same for a Delta table of the warehouse (one of the variable delta_locations): files of its
-- current version, and Parquet files outside _delta_log that it does not reference (removed by later
-- commits and not vacuumed yet). Delta's own reader opens files past the session's folders, so no
-- other location is listed.
CREATE OR REPLACE MACRO delta_files(location) AS TABLE
    WITH live AS (
        SELECT data_file, cardinality FROM delta_list_files(if(
            list_contains(coalesce(getvariable('delta_locations'), []), location),
            location,
            error('delta_files: ' || location || ' is not a Delta table of this warehouse')
        ))
    ),
    listed AS (
        SELECT filename, size FROM read_blob(location || '/**/*.parquet')
        WHERE NOT contains(filename, '/_delta_log/')
    )
    SELECT
        coalesce(live.data_file, listed.filename) AS file_path,
        live.data_file IS NOT NULL AS live,
        live.cardinality::BIGINT AS row_count,
        listed.size AS bytes
    FROM live
    FULL OUTER JOIN listed ON path_key(live.data_file) = path_key(listed.filename);

-- Every snapshot of an Iceberg table, oldest first, with its summary as JSON: Iceberg's counters
-- (total-records, added-data-files, ...) and what writers add (seqlake.* on the history table).
-- iceberg_snapshots() has no summaries; they come from the metadata file itself.
CREATE OR REPLACE MACRO iceberg_snapshot_log(metadata) AS TABLE
    WITH summaries AS (
        SELECT (s ->> 'snapshot-id')::UBIGINT AS snapshot_id, s -> 'summary' AS summary
        FROM (SELECT unnest(json_extract(content, '$.snapshots[*]')) AS s FROM read_text(metadata))
    )
    SELECT
        i.sequence_number,
        i.snapshot_id,
        timezone('UTC', i.timestamp_ms) AS committed_at,
        i.operation,
        s.summary
    FROM iceberg_snapshots(metadata) AS i
    LEFT JOIN summaries AS s USING (snapshot_id)
    ORDER BY i.sequence_number;

-- An Iceberg table's properties as (property, value) rows.
CREATE OR REPLACE MACRO iceberg_properties(metadata) AS TABLE
    SELECT p.key AS property, p.value ->> '$' AS value
    FROM read_text(metadata) AS t, json_each(t.content -> 'properties') AS p;

-- The history table's commits (tableformat/SPEC.md, "Sorted runs"): which runs each added or
-- replaced, the window a publication closed and the LSN frontier it recorded (source partition ->
-- highest LSN published so far).
CREATE OR REPLACE VIEW history_snapshots AS
    SELECT
        sequence_number,
        snapshot_id,
        committed_at,
        operation,
        summary ->> 'seqlake.operation' AS seqlake_operation,
        string_split(nullif(summary ->> 'seqlake.added-runs', ''), ',') AS added_runs,
        string_split(nullif(summary ->> 'seqlake.replaced-runs', ''), ',') AS replaced_runs,
        (summary ->> 'seqlake.window-id')::BIGINT AS window_id,
        CAST(json(summary ->> 'seqlake.frontier') AS MAP(INTEGER, BIGINT)) AS frontier,
        (summary ->> 'total-records')::BIGINT AS total_rows,
        (summary ->> 'total-data-files')::BIGINT AS total_files
    FROM iceberg_snapshot_log(getvariable('history_metadata'));

-- The live sorted runs, oldest first, as the table property seqlake.runs records them.
CREATE OR REPLACE VIEW history_runs AS
    SELECT
        run.run_id,
        run.kind,
        list_min(run.windows) AS first_window,
        list_max(run.windows) AS last_window,
        run.windows,  -- the exact set of windows the run holds (a merge: the union of its inputs')
        run.files,
        run."rows" AS row_count
    FROM (
        SELECT unnest(map_values(CAST(json(value) AS MAP(
            VARCHAR, STRUCT(run_id VARCHAR, kind VARCHAR, windows BIGINT[], files BIGINT, "rows" BIGINT)
        )))) AS run
        FROM iceberg_properties(getvariable('history_metadata'))
        WHERE property = 'seqlake.runs'
    )
    ORDER BY first_window, run.run_id;

-- Each processing window a live run holds (a merged run holds every window of the runs it merged).
CREATE OR REPLACE VIEW window_runs AS
    SELECT unnest(windows) AS window_id, run_id, kind
    FROM history_runs
    ORDER BY window_id;

-- With --file: the history table's commits.
SELECT sequence_number, committed_at, seqlake_operation, added_runs, replaced_runs, window_id, frontier, total_rows
FROM history_snapshots;
