"""Stage 1 of a query, parse: the user's text as sqlglot trees (headwater's dialect,
Flink's syntax rewritten) and the ``CREATE TABLE`` definitions. Reads no table."""
