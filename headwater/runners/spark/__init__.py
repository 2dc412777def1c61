"""Spark runners: bounded (batch plans) and unbounded (Structured Streaming)."""
