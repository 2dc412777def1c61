-- docs/sql/winners.sql: Query 7 over the paper's bids, into two sinks.
-- Run from the repository root: headwater sql -f docs/sql/winners.sql

-- A source: a recorded stream (a replay), its event time and watermark.
CREATE TABLE Bid (
  bidtime TIMESTAMP,
  price   BIGINT,
  item    VARCHAR,
  WATERMARK FOR bidtime AS bidtime
) WITH ('format' = 'replay', 'path' = 'tests/sql/data/paper/bids.jsonl');

-- A sink of the changelog, as Parquet (a directory per batch).
CREATE TABLE WinnerLog (wstart TIMESTAMP, wend TIMESTAMP, bidtime TIMESTAMP,
                        price BIGINT, item VARCHAR)
  WITH ('format' = 'changelog', 'path' = 'tmp/sql-docs/winner-log');

-- A sink of the current rows: the changelog applied to a DuckDB table.
CREATE TABLE Winners (wstart TIMESTAMP, wend TIMESTAMP, bidtime TIMESTAMP,
                      price BIGINT, item VARCHAR)
  WITH ('format' = 'table', 'path' = 'tmp/sql-docs/winners.duckdb', 'table' = 'winners');

INSERT INTO WinnerLog
SELECT MaxBid.wstart, MaxBid.wend, Bid.bidtime, Bid.price, Bid.item
FROM Bid,
     (SELECT MAX(price) AS maxPrice, wstart, wend
      FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
                  dur => INTERVAL '10' MINUTE)
      GROUP BY wstart, wend) MaxBid
WHERE Bid.price = MaxBid.maxPrice
  AND Bid.bidtime >= MaxBid.wstart AND Bid.bidtime < MaxBid.wend
EMIT STREAM;

INSERT INTO Winners
SELECT MaxBid.wstart, MaxBid.wend, Bid.bidtime, Bid.price, Bid.item
FROM Bid,
     (SELECT MAX(price) AS maxPrice, wstart, wend
      FROM Tumble(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
                  dur => INTERVAL '10' MINUTE)
      GROUP BY wstart, wend) MaxBid
WHERE Bid.price = MaxBid.maxPrice
  AND Bid.bidtime >= MaxBid.wstart AND Bid.bidtime < MaxBid.wend
EMIT STREAM;

-- The changelog written above, read back as a (bounded) Parquet table.
CREATE TABLE Log (wstart TIMESTAMP, wend TIMESTAMP, bidtime TIMESTAMP, price BIGINT,
                  item VARCHAR, undo BOOLEAN, ptime TIMESTAMP, ver BIGINT)
  WITH ('format' = 'parquet', 'path' = 'tmp/sql-docs/winner-log');

SELECT item, undo, ptime, ver FROM Log ORDER BY ptime, undo DESC, item;
