-- The NEXMark sources, as Flink's ddl_gen.sql + ddl_views.sql declare them (the
-- views' columns, the watermark of 4 seconds), each a replay file that
-- `headwater nexmark generate --format replay` writes under ${DATA}.
CREATE TABLE person (
    id  BIGINT,
    name  VARCHAR,
    emailAddress  VARCHAR,
    creditCard  VARCHAR,
    city  VARCHAR,
    state  VARCHAR,
    dateTime TIMESTAMP(3),
    extra  VARCHAR,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('format' = 'replay', 'path' = '${DATA}/person.jsonl');

CREATE TABLE auction (
    id  BIGINT,
    itemName  VARCHAR,
    description  VARCHAR,
    initialBid  BIGINT,
    reserve  BIGINT,
    dateTime  TIMESTAMP(3),
    expires  TIMESTAMP(3),
    seller  BIGINT,
    category  BIGINT,
    extra  VARCHAR,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('format' = 'replay', 'path' = '${DATA}/auction.jsonl');

CREATE TABLE bid (
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    url  VARCHAR,
    dateTime  TIMESTAMP(3),
    extra  VARCHAR,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('format' = 'replay', 'path' = '${DATA}/bid.jsonl');
