"""Stores of the structured channel, published under this path: the versioned fact store (SQLite default,
PostgreSQL for replicas) and fact ingestion from tables. The code lives in ``ragspine.stores``
(``fact_store``, ``pg_fact_store``, ``fact_schema``, ``fact_ingest``); these modules re-export it."""
