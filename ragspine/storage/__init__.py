"""Stores of the structured channel: the versioned fact store (SQLite default, PostgreSQL for replicas)
and fact ingestion from tables (CSV, XLSX) and JSON/JSONL facts files."""
