-- runs.sql: the history table's sorted runs and their files (tableformat/SPEC.md, "Sorted runs").
--
--   run_files  every data file of the history table with its run and bucket (both in its name),
--              live or only on storage (replaced runs kept for older snapshots)
--   runs       the live runs as seqlake.runs records them, checked against the live files, with the
--              commit that published each
--
-- history_runs, history_snapshots and window_runs are in catalog.sql.

CREATE OR REPLACE VIEW run_files AS
    SELECT
        regexp_extract(file_path, '/r([a-z0-9]+)-b([0-9]+)-[^/]*$', 1) AS run_id,
        regexp_extract(file_path, '/r([a-z0-9]+)-b([0-9]+)-[^/]*$', 2)::INTEGER AS bucket,
        live,
        row_count,
        bytes,
        file_path
    FROM iceberg_files(getvariable('history_metadata'), getvariable('history_location'));

CREATE OR REPLACE VIEW runs AS
    WITH found AS (
        SELECT run_id, count(*) AS found_files, sum(row_count)::BIGINT AS found_rows, sum(bytes)::BIGINT AS bytes
        FROM run_files
        WHERE live
        GROUP BY run_id
    ),
    published AS (
        SELECT run_id, max(committed_at) AS published_at
        FROM (SELECT unnest(added_runs) AS run_id, committed_at FROM history_snapshots)
        GROUP BY run_id
    )
    SELECT
        r.run_id,
        r.kind,
        r.first_window,
        r.last_window,
        r.files,
        r.row_count,
        f.bytes,
        p.published_at,
        r.files = coalesce(f.found_files, 0) AND r.row_count = coalesce(f.found_rows, 0) AS matches_files
    FROM history_runs AS r
    LEFT JOIN found AS f USING (run_id)
    LEFT JOIN published AS p USING (run_id)
    ORDER BY r.first_window, r.run_id;

-- With --file:
SELECT * FROM runs;
SELECT run_id, live, count(*) AS files, sum(row_count)::BIGINT AS row_count, sum(bytes)::BIGINT AS bytes
FROM run_files
GROUP BY run_id, live
ORDER BY live DESC, run_id;
