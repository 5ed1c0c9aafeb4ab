-- history.sql: one user's history, what each tenant's model reads of it, and history lengths.
--
--   user_history(uid)            all of the user's rows in sequence order (event time, then LSN)
--   user_recent(uid, k)          the user's newest k rows, in sequence order
--   tenants                      each model's read profile (configuration `tenants`)
--   tenant_spec(tenant)          one profile; an unknown tenant is an error
--   tenant_history(uid, tenant)  what the tenant reads: its feature groups, its newest max_length rows,
--                                the key columns and its columns
--   history_lengths              rows and events of every user's history
--   length_distribution          users per history length (powers of two of rows)
--
-- Pass user ids and tenants as values: `seqlake sql -q 'FROM user_history($uid)' -p uid=1000000`,
-- or `?` from Python. Nothing here builds SQL text from them.

CREATE OR REPLACE MACRO user_history(uid) AS TABLE
    SELECT * FROM history WHERE user_id = uid ORDER BY event_ts, lsn;

CREATE OR REPLACE MACRO user_recent(uid, k) AS TABLE
    SELECT * FROM history
    WHERE user_id = uid
    QUALIFY row_number() OVER (ORDER BY event_ts DESC, lsn DESC) <= k
    ORDER BY event_ts, lsn;

CREATE OR REPLACE VIEW tenants AS
    SELECT unnest(map_keys(getvariable('tenants'))) AS tenant,
           unnest(map_values(getvariable('tenants')), recursive := true);

CREATE OR REPLACE MACRO tenant_spec(tenant) AS
    coalesce(
        getvariable('tenants')[tenant],
        error('unknown tenant ' || tenant || ' (tenants: ' || array_to_string(map_keys(getvariable('tenants')), ', ') || ')')
    );

-- The column list is chosen when the query is bound, so it reads the variable directly; an unknown
-- tenant selects every column there and then fails on tenant_spec, once, with the tenants' names.
CREATE OR REPLACE MACRO tenant_history(uid, tenant) AS TABLE
    SELECT
        h.user_id,
        h.feature_group,
        h.event_ts,
        h.lsn,
        COLUMNS(c -> list_contains(coalesce(getvariable('tenants')[tenant].columns, [c]), c)
                     AND c NOT IN ('user_id', 'feature_group', 'event_ts', 'lsn', 'spec'))
    FROM history AS h, (SELECT tenant_spec(tenant) AS spec) AS t
    WHERE h.user_id = uid AND list_contains(t.spec.feature_groups, h.feature_group)
    QUALIFY row_number() OVER (ORDER BY h.event_ts DESC, h.lsn DESC) <= t.spec.max_length
    ORDER BY h.event_ts, h.lsn;

CREATE OR REPLACE VIEW history_lengths AS
    SELECT
        user_id,
        count(*) AS row_count,
        sum(event_count)::BIGINT AS events,
        count(DISTINCT feature_group) AS feature_groups,
        min(event_ts) AS first_event,
        max(event_ts) AS last_event
    FROM history
    GROUP BY user_id;

CREATE OR REPLACE VIEW length_distribution AS
    WITH bucketed AS (
        SELECT (2 ** floor(log2(row_count)))::BIGINT AS min_rows, row_count FROM history_lengths
    )
    SELECT
        min_rows,
        2 * min_rows - 1 AS max_rows,
        count(*) AS users,
        sum(row_count)::BIGINT AS row_count,
        round(100 * sum(row_count) / sum(sum(row_count)) OVER (), 2) AS pct_of_rows
    FROM bucketed
    GROUP BY min_rows
    ORDER BY min_rows;

-- With --file:
SELECT * FROM tenants;
SELECT * FROM length_distribution;
