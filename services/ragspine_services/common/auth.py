"""Bearer-token authentication: who is calling, which libraries they may touch, and how.

Front tier: a tokens file ``{token: {"caller": name, "libraries": [ids] or ["*"], "scopes": [...]}}``.
Scopes are ``read`` (Retrieve, ListLibraries), ``write`` (Ingest, IngestStream, DeleteDocument) and
``admin`` (both, and what only an administrator may learn: e.g. that a RESTRICTED document exists). An
entry without ``scopes`` keeps full access to its libraries; ``"scopes": ["read"]`` narrows it to every one
of them, ``"scopes": {"lib-a": ["read", "write"], "*": ["read"]}`` sets them per library (``"*"`` = any
other library of the entry). The file is re-read when it changes (no restart); a change that does not
parse is logged and the previous table stays in force. Tokens are compared in constant time.
Model worker: one service token that the front presents. Without either the service is open (laptop
mode on loopback).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ragspine_services.common.errors import PermissionDeniedError, UnauthenticatedError

_BEARER = "bearer "
_LOG = logging.getLogger("ragspine_services.auth")

READ = "read"
WRITE = "write"
ADMIN = "admin"
SCOPES: tuple[str, ...] = (READ, WRITE, ADMIN)
ALL_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Caller:
    """An authenticated caller. ``libraries is None`` means every library; ``scopes is None`` means every
    scope on those libraries, else ``scopes`` maps a library id (or ``"*"``) to its scopes."""

    name: str
    libraries: frozenset[str] | None = None
    scopes: Mapping[str, frozenset[str]] | None = None

    def scopes_for(self, library: str) -> frozenset[str]:
        """The scopes this caller holds on ``library`` (empty when it may not touch it)."""
        if self.libraries is not None and library not in self.libraries:
            return frozenset()
        if self.scopes is None:
            return ALL_SCOPES
        held = self.scopes.get(library, self.scopes.get("*", frozenset()))
        return ALL_SCOPES if ADMIN in held else held

    def may(self, library: str, scope: str) -> bool:
        """True when this caller holds ``scope`` (read / write / admin) on ``library``."""
        return scope in self.scopes_for(library)

    def may_read(self, library: str) -> bool:
        """True when this caller may read ``library``."""
        return self.may(library, READ)

    def may_write(self, library: str) -> bool:
        """True when this caller may write (ingest into, delete from) ``library``."""
        return self.may(library, WRITE)

    def is_admin(self, library: str) -> bool:
        return self.may(library, ADMIN)

    def require(self, library: str, scope: str = READ) -> None:
        """Raise ``PermissionDeniedError`` unless the caller holds ``scope`` on ``library``."""
        if not self.may(library, scope):
            if not self.scopes_for(library):
                raise PermissionDeniedError(f"caller {self.name!r} may not access library {library!r}")
            raise PermissionDeniedError(
                f"caller {self.name!r} may not {scope} library {library!r} (its token lacks the "
                f"{scope!r} scope there)"
            )


ANONYMOUS = Caller("anonymous")
_CURRENT: contextvars.ContextVar[Caller] = contextvars.ContextVar("ragspine_caller", default=ANONYMOUS)


def current_caller() -> Caller:
    """The caller of the RPC being served on this thread (``ANONYMOUS`` outside an authenticated call)."""
    return _CURRENT.get()


def set_current_caller(caller: Caller) -> contextvars.Token[Caller]:
    """Bind ``caller`` for the current call; pass the returned token to :func:`reset_current_caller`."""
    return _CURRENT.set(caller)


def reset_current_caller(token: contextvars.Token[Caller]) -> None:
    _CURRENT.reset(token)


class Authenticator(Protocol):
    """Turns call metadata into a ``Caller`` or raises ``UnauthenticatedError``."""

    def authenticate(self, metadata: Mapping[str, str]) -> Caller: ...


def bearer_token(metadata: Mapping[str, str]) -> str:
    """The token of an ``authorization: Bearer <token>`` header; raises ``UnauthenticatedError`` if absent."""
    raw = metadata.get("authorization", "")
    if not raw.lower().startswith(_BEARER) or not raw[len(_BEARER) :].strip():
        raise UnauthenticatedError("missing credentials: send 'authorization: Bearer <token>' metadata")
    return raw[len(_BEARER) :].strip()


def _digest(token: str) -> bytes:
    # Comparing fixed-length digests keeps the comparison's time independent of the tokens' lengths too.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class OpenAuthenticator:
    """No authentication: every call is ``ANONYMOUS`` with access to all libraries."""

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        return ANONYMOUS


def _scopes(value: Any, where: str, libraries: frozenset[str] | None) -> Mapping[str, frozenset[str]] | None:
    """The ``scopes`` of one tokens-file entry (None = not given = full access)."""
    if value is None:
        return None

    def one(names: Any, at: str) -> frozenset[str]:
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise ValueError(f"{at} must be a list of scopes ({', '.join(SCOPES)})")
        unknown = sorted(set(names) - ALL_SCOPES)
        if unknown:
            raise ValueError(f"{at}: unknown scope(s) {', '.join(unknown)}; use {', '.join(SCOPES)}")
        return frozenset(names)

    if isinstance(value, list):
        return {"*": one(value, f"{where}.scopes")}
    if isinstance(value, dict):
        out = {str(lib): one(names, f"{where}.scopes[{lib!r}]") for lib, names in value.items()}
        stray = sorted(lib for lib in out if lib != "*" and libraries is not None and lib not in libraries)
        if stray:
            raise ValueError(f"{where}.scopes names libraries outside its 'libraries': {', '.join(stray)}")
        return out
    raise ValueError(f"{where}.scopes must be a list of scopes or {{library: [scopes]}}")


def parse_tokens(data: Any, source: str) -> dict[str, Caller]:
    """The token table of a parsed tokens file; ``ValueError`` naming ``source`` and the bad entry."""
    if not isinstance(data, dict):
        raise ValueError(f"tokens file {source} must hold a JSON object {{token: {{caller, libraries}}}}")
    table: dict[str, Caller] = {}
    for token, entry in data.items():
        caller = entry.get("caller") if isinstance(entry, dict) else None
        libraries = entry.get("libraries") if isinstance(entry, dict) else None
        if not token or not isinstance(caller, str) or not caller:
            raise ValueError(f"tokens file {source}: every entry needs a non-empty token and 'caller' name")
        if not isinstance(libraries, list) or not all(isinstance(x, str) for x in libraries):
            raise ValueError(f"tokens file {source}: caller {caller!r} needs 'libraries': [ids] or ['*']")
        allowed = None if "*" in libraries else frozenset(libraries)
        scopes = _scopes(entry.get("scopes"), f"tokens file {source}: caller {caller!r}", allowed)
        table[token] = Caller(caller, allowed, scopes)
    if not table:
        raise ValueError(f"tokens file {source} is empty: nobody could call the service")
    return table


class TokenTableAuthenticator:
    """Per-caller tokens with a library allow-list and scopes each (the front tier's auth).

    Built :meth:`from_file`, it re-reads the file when its modification time, size or inode changes
    (checked at most every ``reload_check_s`` seconds), so tokens can be added or revoked without a
    restart; a file that no longer parses keeps the previous table in force (logged as an error).
    """

    def __init__(
        self, table: Mapping[str, Caller], *, path: str | Path | None = None, reload_check_s: float = 0.0
    ) -> None:
        if not table:
            raise ValueError("the tokens table is empty: nobody could call the service")
        self._entries = self._digests(table)
        self._path = Path(path) if path is not None else None
        self._reload_check_s = reload_check_s
        self._lock = threading.Lock()
        self._stamp = self._file_stamp() if self._path is not None else None
        self._checked_at = 0.0

    @staticmethod
    def _digests(table: Mapping[str, Caller]) -> tuple[tuple[bytes, Caller], ...]:
        return tuple((_digest(token), caller) for token, caller in table.items())

    @classmethod
    def from_file(cls, path: str | Path, *, reload_check_s: float = 0.0) -> TokenTableAuthenticator:
        """Load ``{token: {"caller": str, "libraries": [str, ...] | ["*"], "scopes"?: ...}}``.

        Raises ``ValueError`` naming the file and the bad entry when the JSON or an entry is malformed,
        ``FileNotFoundError`` when the file is missing.
        """
        return cls(cls._read(Path(path)), path=path, reload_check_s=reload_check_s)

    @staticmethod
    def _read(path: Path) -> dict[str, Caller]:
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tokens file {path} is not valid JSON: {exc}") from None
        return parse_tokens(data, str(path))

    def _file_stamp(self) -> tuple[int, int, int] | None:
        assert self._path is not None
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _maybe_reload(self) -> None:
        if self._path is None:
            return
        now = time.monotonic()
        if self._reload_check_s and now - self._checked_at < self._reload_check_s:
            return
        with self._lock:
            self._checked_at = now
            stamp = self._file_stamp()
            if stamp == self._stamp or stamp is None:
                if stamp is None and self._stamp is not None:
                    _LOG.error("tokens file %s is gone; the last loaded tokens stay in force", self._path)
                    self._stamp = None
                return
            try:
                entries = self._digests(self._read(self._path))
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                _LOG.error(
                    "tokens file %s changed but cannot be loaded (%s); keeping the old tokens",
                    self._path,
                    exc,
                )
                self._stamp = stamp  # report once per change, not on every call
                return
            self._entries = entries
            self._stamp = stamp
            _LOG.info("tokens file %s reloaded (%d tokens)", self._path, len(entries))

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        self._maybe_reload()
        presented = _digest(bearer_token(metadata))
        found: Caller | None = None
        # Compare against every token in constant time so timing reveals neither a near match nor which
        # entry matched.
        for known, caller in self._entries:
            if hmac.compare_digest(known, presented):
                found = caller
        if found is None:
            raise UnauthenticatedError("unknown token")
        return found


class ServiceTokenAuthenticator:
    """One shared service token (the worker's auth: only the front calls it)."""

    def __init__(self, token: str, caller: str = "front") -> None:
        if not token:
            raise ValueError("service token is empty")
        self._token = _digest(token)
        self._caller = Caller(caller)

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        if not hmac.compare_digest(_digest(bearer_token(metadata)), self._token):
            raise UnauthenticatedError("unknown service token")
        return self._caller
