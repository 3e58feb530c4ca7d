"""Schema names of libraries in PostgreSQL (``lib_<id>``), apart from the database code.

Every front names a library's schema (a shared vector store keys its tables by it) whether or not it runs
on PostgreSQL; this module needs no database driver, so a SQLite deployment does not import psycopg at start.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["SCHEMA_PREFIX", "library_schema"]

SCHEMA_PREFIX = "lib_"
_MAX_IDENTIFIER = 63
_HASH_HEX = 10
# A rewritten id ends in "__<hash>"; a kept one may not contain "__", so the two forms never meet.
_KEPT = re.compile(r"^[a-z0-9_]+$")
_UNSAFE = re.compile(r"[^a-z0-9_]")


def library_schema(library_id: str) -> str:
    """The PostgreSQL schema of library ``library_id``: deterministic, and distinct ids get distinct names.

    An id made only of lowercase letters, digits and single '_' that fits keeps its spelling
    (``docs`` → ``lib_docs``). Anything else is lowercased, every other character becomes '_', and a hash
    of the exact id is appended after a double underscore (``Team.A-1`` → ``lib_team_a_1__<10 hex>``),
    shortening the readable part when the name would pass 63 bytes. Raises ``ValueError`` for an empty or
    non-string id.
    """
    if not isinstance(library_id, str) or not library_id:
        raise ValueError(f"library id must be a non-empty string, got {library_id!r}")
    room = _MAX_IDENTIFIER - len(SCHEMA_PREFIX)
    if _KEPT.match(library_id) and "__" not in library_id and len(library_id) <= room:
        return SCHEMA_PREFIX + library_id
    tag = "__" + hashlib.blake2b(library_id.encode("utf-8"), digest_size=8).hexdigest()[:_HASH_HEX]
    readable = _UNSAFE.sub("_", library_id.lower())[: room - len(tag)]
    return SCHEMA_PREFIX + readable + tag
