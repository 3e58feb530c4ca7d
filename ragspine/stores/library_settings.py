"""Per-library settings kept in the library's own store (``narrative_library_setting``: name → value).

A library remembers the chunker and contextual index text it was given at ingest, so later ingests that
name none, every replica and every restart use the same ones. ``LibrarySettingsMixin`` implements the two
operations once for the SQLite and PostgreSQL chunk stores on top of their ledger transaction hook
(``_ledger_tx``: a write transaction is serialised with every other write to the library) and ``_q``, so
the read-check-write of ``update_library_settings`` never races another writer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from ragspine.stores.base import SqlStore

SETTINGS_TABLE = "narrative_library_setting"
_CHUNKS = "narrative_chunk"

# ``decide(stored, has_chunks)`` returns the settings to write (raising refuses the change).
Decide = Callable[[dict[str, str], bool], Mapping[str, str]]


def library_settings_ddl(*, text: str) -> str:
    """The CREATE statement of the settings table with the store's text type."""
    return f"CREATE TABLE IF NOT EXISTS {SETTINGS_TABLE} (name {text} PRIMARY KEY, value TEXT NOT NULL)"


@runtime_checkable
class LibrarySettingsStore(Protocol):
    """What the front needs from a store that keeps library settings."""

    def library_settings(self) -> dict[str, str]: ...

    def update_library_settings(self, decide: Decide) -> dict[str, str]: ...


class LibrarySettingsMixin(SqlStore):
    """The settings table's SQL, shared by ``ChunkStore`` and ``PgChunkStore``."""

    def library_settings(self) -> dict[str, str]:
        """Every stored setting (``{}`` for a library that has none)."""
        with self._ledger_tx(write=False) as conn:
            rows = self._q(conn, f"SELECT name, value FROM {SETTINGS_TABLE}").fetchall()
        return {str(name): str(value) for name, value in rows}

    def update_library_settings(self, decide: Decide) -> dict[str, str]:
        """In one write transaction: read the stored settings and whether the library holds any active
        chunk, call ``decide(stored, has_chunks)`` and store what it returns. Returns the settings now
        stored. Whatever ``decide`` raises propagates and nothing is written."""
        with self._ledger_tx(write=True) as conn:
            stored = {
                str(n): str(v)
                for n, v in self._q(conn, f"SELECT name, value FROM {SETTINGS_TABLE}").fetchall()
            }
            has_chunks = (
                self._q(conn, f"SELECT 1 FROM {_CHUNKS} WHERE active = 1 LIMIT 1").fetchone() is not None
            )
            changes = dict(decide(dict(stored), has_chunks))
            for name, value in sorted(changes.items()):
                if stored.get(name) == value:
                    continue
                self._q(
                    conn,
                    f"INSERT INTO {SETTINGS_TABLE} (name, value) VALUES (?, ?)"
                    " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (name, value),
                )
                stored[name] = value
        return stored


__all__ = [
    "SETTINGS_TABLE",
    "Decide",
    "LibrarySettingsMixin",
    "LibrarySettingsStore",
    "library_settings_ddl",
]
