-- storage.sql: what each table of the warehouse stores, and the history table against the rest.
--
--   files_<table>           one view per table this warehouse has (iceberg_files / delta_files)
--   storage_files           all of them together
--   table_storage           per table: live files, rows, bytes, bytes per row, and the files on storage
--                           the current version no longer references
--   storage_summary         the history table against every other table
--   history_column_storage  compressed bytes per history column (manifest column sizes)
--
-- Bytes are file sizes from a listing of the table's folder; rows come from Iceberg manifests and
-- Delta commit statistics. Metadata files (manifests, logs) are not counted.

CREATE OR REPLACE VIEW files_history AS
    SELECT 'history' AS table_name, 'iceberg' AS format, *
    FROM iceberg_files(getvariable('history_metadata'), getvariable('history_location'));

CREATE OR REPLACE VIEW files_history_detail AS
    SELECT 'history_detail' AS table_name, 'iceberg' AS format, *
    FROM iceberg_files(getvariable('history_detail_metadata'), getvariable('history_detail_location'));

CREATE OR REPLACE VIEW files_raw_events AS
    SELECT 'raw_events' AS table_name, 'iceberg' AS format, *
    FROM iceberg_files(getvariable('raw_events_metadata'), getvariable('raw_events_location'));

CREATE OR REPLACE VIEW files_landing_events AS
    SELECT 'landing_events' AS table_name, 'delta' AS format, *
    FROM delta_files(getvariable('landing_events_location'));

CREATE OR REPLACE VIEW files_quarantine AS
    SELECT 'quarantine' AS table_name, 'delta' AS format, *
    FROM delta_files(getvariable('quarantine_location'));

-- The union of the files_<table> views of the tables `seqlake sql` found (variable seqlake_tables).
CREATE OR REPLACE VIEW storage_files AS
    FROM query_table(list_transform(map_keys(getvariable('seqlake_tables')), t -> 'files_' || t));

-- Every table the warehouse has, with or without files.
CREATE OR REPLACE VIEW table_storage AS
    WITH tables AS (
        SELECT unnest(map_keys(getvariable('seqlake_tables'))) AS table_name,
               unnest(map_values(getvariable('seqlake_tables'))) AS format
    )
    SELECT
        table_name,
        any_value(t.format) AS format,
        count(f.file_path) FILTER (f.live) AS files,
        coalesce(sum(f.row_count) FILTER (f.live), 0)::BIGINT AS row_count,
        coalesce(sum(f.bytes) FILTER (f.live), 0)::BIGINT AS bytes,
        round(sum(f.bytes) FILTER (f.live) / nullif(sum(f.row_count) FILTER (f.live), 0), 1) AS bytes_per_row,
        count(f.file_path) FILTER (NOT f.live) AS unreferenced_files,
        coalesce(sum(f.bytes) FILTER (NOT f.live), 0)::BIGINT AS unreferenced_bytes
    FROM tables AS t
    LEFT JOIN storage_files AS f USING (table_name)
    GROUP BY table_name
    ORDER BY bytes DESC, table_name;

CREATE OR REPLACE VIEW storage_summary AS
    SELECT
        CASE WHEN table_name = 'history' THEN 'history' ELSE 'other tables' END AS part,
        list(table_name ORDER BY table_name) AS tables,
        sum(files)::BIGINT AS files,
        sum(row_count)::BIGINT AS row_count,
        sum(bytes)::BIGINT AS bytes,
        round(100 * sum(bytes) / nullif(sum(sum(bytes)) OVER (), 0), 1) AS pct_of_bytes
    FROM table_storage
    GROUP BY part
    ORDER BY part;

CREATE OR REPLACE VIEW history_column_storage AS
    SELECT
        column_name,
        sum(column_size)::BIGINT AS bytes,
        round(sum(column_size) / nullif(sum(value_count), 0), 3) AS bytes_per_row,
        round(100 * sum(column_size) / sum(sum(column_size)) OVER (), 1) AS pct_of_bytes
    FROM iceberg_column_stats(getvariable('history_metadata'))
    GROUP BY column_name
    ORDER BY bytes DESC, column_name;

-- With --file:
SELECT * FROM table_storage;
SELECT * FROM storage_summary;
