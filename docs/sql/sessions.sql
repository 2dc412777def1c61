-- docs/sql/sessions.sql: Flink's SESSION examples, in both spellings.
CREATE TABLE Bid (bidtime TIMESTAMP, price DOUBLE, item VARCHAR)
  WITH ('format' = 'csv', 'path' = 'tests/sql/data/paper/bid_session_table.csv');

SELECT window_start, window_end, item, SUM(price) AS total_price
  FROM TABLE(
      SESSION(TABLE Bid PARTITION BY item, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES))
  GROUP BY item, window_start, window_end
  ORDER BY window_start, item;

SELECT wstart, wend, item, SUM(price) AS total_price
  FROM Session(data => TABLE(Bid), timecol => DESCRIPTOR(bidtime),
               gap => INTERVAL '5' MINUTES, keys => DESCRIPTOR(item))
  GROUP BY item, wstart, wend
  ORDER BY wstart, item;
