-- docs/sql/corrected.sql: the late bid G, corrected from an archive.
-- Run from the repository root: headwater sql -f docs/sql/corrected.sql

-- G (8:08, $7) arrives at 8:22, after the watermark passed the end of its
-- window: a dead letter. Every bid is archived; the dead letters are corrected
-- once they span more than 5 seconds of event time, and at the end of the input.
CREATE TABLE Bid (
  bidtime TIMESTAMP,
  price   BIGINT,
  item    VARCHAR,
  WATERMARK FOR bidtime AS bidtime
) WITH ('format' = 'replay', 'path' = 'docs/sql/late_bids.jsonl',
        'correction.archive' = 'tmp/sql-docs/archive', 'correction.gamma' = '5 seconds');

SELECT wstart, wend, MAX(price) AS top
FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime), dur => INTERVAL '10' MINUTE)
GROUP BY wstart, wend
EMIT STREAM;
