"""Fact ingestion from tables (CSV, XLSX) and JSON/JSONL facts files: ``ragspine.stores.fact_ingest``,
re-exported from the published path."""

from __future__ import annotations

from ragspine.stores.fact_ingest import *  # noqa: F403
