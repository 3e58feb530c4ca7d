"""The fact store on PostgreSQL: ``ragspine.stores.pg_fact_store``, re-exported from the published path."""

from __future__ import annotations

from ragspine.stores.pg_fact_store import PgFactStore

__all__ = ["PgFactStore"]
