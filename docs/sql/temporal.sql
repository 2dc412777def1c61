-- docs/sql/temporal.sql: an event-time temporal join (Flink's example), as a changelog.
CREATE TABLE currency_rates (
    currency STRING,
    conversion_rate DECIMAL(32, 2),
    update_time TIMESTAMP(3),
    PRIMARY KEY (currency) NOT ENFORCED,
    WATERMARK FOR update_time AS update_time
) WITH ('format' = 'replay', 'path' = 'docs/sql/rates.jsonl');

CREATE TABLE orders (
    order_id BIGINT,
    price DECIMAL(32, 2),
    currency STRING,
    order_time TIMESTAMP(3),
    WATERMARK FOR order_time AS order_time
) WITH ('format' = 'replay', 'path' = 'docs/sql/orders.jsonl');

SELECT order_id, price, orders.currency, conversion_rate, order_time
FROM orders
LEFT JOIN currency_rates FOR SYSTEM_TIME AS OF orders.order_time
ON orders.currency = currency_rates.currency
EMIT STREAM;
