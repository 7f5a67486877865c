"""Capture files into the store: one reader per ncu format, units to base units, the Parquet store."""
