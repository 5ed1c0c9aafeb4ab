-- freshness.sql: how far the history table is behind the landing tier.
--
--   window_freshness     per processing window: landed and quarantined rows, published or not, when,
--                        and the LSN frontier its publication recorded
--   partition_freshness  per source partition: highest LSN landed, highest LSN published, the gap
--
-- Needs landing_events and quarantine (Delta) and the history table (catalog.sql).

CREATE OR REPLACE VIEW window_freshness AS
    WITH landed AS (
        SELECT window_id, count(*) AS landed_rows, count(DISTINCT event_id) AS landed_events
        FROM landing_events
        GROUP BY window_id
    ),
    quarantined AS (
        SELECT window_id, count(*) AS quarantined_rows FROM quarantine GROUP BY window_id
    ),
    publications AS (
        -- A window's own publication; a later merge keeps it published but records no window.
        SELECT window_id, arg_max(committed_at, sequence_number) AS published_at,
               arg_max(frontier, sequence_number) AS frontier
        FROM history_snapshots
        WHERE window_id IS NOT NULL
        GROUP BY window_id
    ),
    windows AS (
        SELECT window_id FROM landed
        UNION SELECT window_id FROM quarantined
        UNION SELECT window_id FROM window_runs
    )
    SELECT
        w.window_id,
        window_start(w.window_id) AS window_start,
        coalesce(l.landed_rows, 0) AS landed_rows,
        coalesce(l.landed_events, 0) AS landed_events,
        coalesce(q.quarantined_rows, 0) AS quarantined_rows,
        r.run_id IS NOT NULL AS published,
        r.run_id,
        p.published_at,
        p.frontier
    FROM windows AS w
    LEFT JOIN landed AS l USING (window_id)
    LEFT JOIN quarantined AS q USING (window_id)
    LEFT JOIN window_runs AS r USING (window_id)
    LEFT JOIN publications AS p USING (window_id)
    ORDER BY w.window_id;

-- The frontier of the newest published window against what has landed: `lsns_behind` records of a
-- partition have arrived (valid or quarantined) but are not published yet (LSNs count records).
CREATE OR REPLACE VIEW partition_freshness AS
    WITH arrived AS (
        SELECT source_partition, max(lsn) AS landed_lsn
        FROM (
            SELECT source_partition, lsn FROM landing_events
            UNION ALL SELECT source_partition, lsn FROM quarantine
        )
        GROUP BY source_partition
    ),
    newest AS (
        SELECT window_id, frontier
        FROM history_snapshots
        WHERE frontier IS NOT NULL
        ORDER BY window_id DESC, sequence_number DESC
        LIMIT 1
    ),
    published AS (
        SELECT unnest(map_keys(frontier)) AS source_partition,
               unnest(map_values(frontier)) AS published_lsn,
               window_id AS published_window
        FROM newest
    )
    SELECT
        source_partition,
        a.landed_lsn,
        p.published_lsn,
        p.published_window,
        coalesce(a.landed_lsn, -1) - coalesce(p.published_lsn, -1) AS lsns_behind
    FROM arrived AS a
    FULL OUTER JOIN published AS p USING (source_partition)
    ORDER BY source_partition;

-- With --file:
SELECT * FROM window_freshness;
SELECT * FROM partition_freshness;
