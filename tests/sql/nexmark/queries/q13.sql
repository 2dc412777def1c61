-- The Flink NEXMark query text (nexmark/nexmark, nexmark-flink/src/main/resources/
-- queries/q13.sql) with only its connector clauses replaced by headwater's: the sink
-- is a table kept in DuckDB (${SINK}); the sources are declared in ddl.sql.
-- -------------------------------------------------------------------------------------------------
-- Query 13: Bounded Side Input Join (Not in original suite)
-- -------------------------------------------------------------------------------------------------
-- Joins a stream to a bounded side input, modeling basic stream enrichment.
-- -------------------------------------------------------------------------------------------------

-- TODO: use the new "filesystem" connector once FLINK-17397 is done
CREATE TABLE side_input (
  key BIGINT,
  `value` VARCHAR
) WITH (
  'format' = 'csv',
  'path' = '${DATA}/side_input.csv'
);

CREATE TABLE nexmark_q13 (
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  `dateTime`  TIMESTAMP(3),
  `value`  VARCHAR
) WITH (
  'format' = 'table',
  'path' = '${SINK}'
);

INSERT INTO nexmark_q13
SELECT
    B.auction,
    B.bidder,
    B.price,
    B.`dateTime`,
    S.`value`
FROM (SELECT *, PROCTIME() as p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.key;
