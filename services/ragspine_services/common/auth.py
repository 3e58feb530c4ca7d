"""Bearer-token authentication: who is calling, and which libraries they may touch.

Front tier: a tokens file ``{token: {"caller": name, "libraries": [ids] or ["*"]}}``. Model worker: one
service token that the front presents. Without either the service is open (laptop mode on loopback).
"""

from __future__ import annotations

import contextvars
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ragspine_services.common.errors import PermissionDeniedError, UnauthenticatedError

_BEARER = "bearer "


@dataclass(frozen=True)
class Caller:
    """An authenticated caller; ``libraries is None`` means every library."""

    name: str
    libraries: frozenset[str] | None = None

    def may_read(self, library: str) -> bool:
        """True when this caller may read or write ``library``."""
        return self.libraries is None or library in self.libraries

    def require(self, library: str) -> None:
        """Raise ``PermissionDeniedError`` unless the caller may touch ``library``."""
        if not self.may_read(library):
            raise PermissionDeniedError(f"caller {self.name!r} may not access library {library!r}")


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


class OpenAuthenticator:
    """No authentication: every call is ``ANONYMOUS`` with access to all libraries."""

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        return ANONYMOUS


class TokenTableAuthenticator:
    """Per-caller tokens with a library allow-list each (the front tier's auth)."""

    def __init__(self, table: Mapping[str, Caller]) -> None:
        if not table:
            raise ValueError("the tokens table is empty: nobody could call the service")
        self._table = dict(table)

    @classmethod
    def from_file(cls, path: str | Path) -> TokenTableAuthenticator:
        """Load ``{token: {"caller": str, "libraries": [str, ...] | ["*"]}}``.

        Raises ``ValueError`` naming the file and the bad entry when the JSON or an entry is malformed,
        ``FileNotFoundError`` when the file is missing.
        """
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tokens file {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"tokens file {path} must hold a JSON object {{token: {{caller, libraries}}}}")
        table: dict[str, Caller] = {}
        for token, entry in data.items():
            caller = entry.get("caller") if isinstance(entry, dict) else None
            libraries = entry.get("libraries") if isinstance(entry, dict) else None
            if not token or not isinstance(caller, str) or not caller:
                raise ValueError(f"tokens file {path}: every entry needs a non-empty token and 'caller' name")
            if not isinstance(libraries, list) or not all(isinstance(x, str) for x in libraries):
                raise ValueError(f"tokens file {path}: caller {caller!r} needs 'libraries': [ids] or ['*']")
            table[token] = Caller(caller, None if "*" in libraries else frozenset(libraries))
        return cls(table)

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        token = bearer_token(metadata).encode()
        found: Caller | None = None
        # Compare against every token in constant time so timing does not reveal a near match.
        for known, caller in self._table.items():
            if hmac.compare_digest(known.encode(), token):
                found = caller
        if found is None:
            raise UnauthenticatedError("unknown token")
        return found


class ServiceTokenAuthenticator:
    """One shared service token (the worker's auth: only the front calls it)."""

    def __init__(self, token: str, caller: str = "front") -> None:
        if not token:
            raise ValueError("service token is empty")
        self._token = token.encode()
        self._caller = Caller(caller)

    def authenticate(self, metadata: Mapping[str, str]) -> Caller:
        if not hmac.compare_digest(bearer_token(metadata).encode(), self._token):
            raise UnauthenticatedError("unknown service token")
        return self._caller
