"""Stage 4, execute: the step driver of each runner (local, Spark), the sources a
query reads and the sinks it writes."""
