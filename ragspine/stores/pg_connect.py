"""How every PostgreSQL store reaches the server: one connect timeout, no password in any message, and a
fresh connection after the server dropped the old one.

``PgConnector`` opens connections to one DSN (optionally with ``search_path`` set to a schema). A store
opens its first connection with ``first()`` (an unreachable server is a configuration error:
``ValueError``) and goes through ``live(conn)`` before each use (a connection the server dropped is
replaced; while the server is down that raises ``psycopg.OperationalError``). Every message either
raises names the server by ``redact_dsn`` and has passed through ``scrub_secret``: libpq quotes parts of
a connection string in some errors (a malformed URI comes back whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The driver, for every PostgreSQL store module (None without the [postgres] extra: see require_psycopg).
try:
    import psycopg
    from psycopg import sql as pgsql
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    pgsql = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_SCHEMA",
    "PgConnector",
    "connect_in_schema",
    "first_connection",
    "live_connection",
    "redact_dsn",
    "require_psycopg",
    "scrub_secret",
    "scrubbed_errors",
]

DEFAULT_SCHEMA = "public"
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def require_psycopg(what: str = "the PostgreSQL store") -> None:
    """Raise ``ValueError`` naming the extra when psycopg is not installed."""
    if psycopg is None:
        raise ValueError(f"{what} needs the [postgres] extra: pip install 'ragspine[postgres]'")


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password removed (also where another parameter repeats it), for messages and logs."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "<unparseable DSN>"
    parts.pop("password", None)
    return scrub_secret(" ".join(f"{k}={v}" for k, v in sorted(parts.items())), dsn)


def scrub_secret(message: str, dsn: str) -> str:
    """``message`` (say, a driver error) with the DSN's password replaced by ``***``, in every spelling it
    may take (as typed in a URI, or decoded). Some libpq errors quote part of the connection string."""
    from urllib.parse import quote, unquote

    try:
        from psycopg.conninfo import conninfo_to_dict

        password = str(conninfo_to_dict(dsn).get("password") or "")
    except Exception:
        # Unparseable: the driver may echo any of it, so say nothing more than that it failed.
        return "the DSN does not parse (details withheld: they could contain a password)"
    for spelling in sorted({password, quote(password, safe=""), unquote(password)} - {""}, key=len)[::-1]:
        message = message.replace(spelling, "***")
    return message


def _timeout_s(connect_timeout_s: float) -> int:
    """libpq takes whole seconds (and treats 1 as 2); below one second still means "give up quickly"."""
    if isinstance(connect_timeout_s, bool) or not isinstance(connect_timeout_s, int | float):
        raise ValueError(f"connect_timeout_s must be a number of seconds, got {connect_timeout_s!r}")
    if not connect_timeout_s > 0:
        raise ValueError(f"connect_timeout_s must be > 0 seconds, got {connect_timeout_s!r}")
    return max(1, round(connect_timeout_s))


def connect_in_schema(dsn: str, schema: str, connect_timeout: int) -> Any:
    """A new autocommit connection (``connect_timeout`` in whole seconds) whose unqualified table names
    resolve in ``schema`` (the DSN's own settings for ``public``). Driver errors are raised as they are;
    ``PgConnector.connect`` is the scrubbed way in."""
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout)
    if schema != DEFAULT_SCHEMA:
        try:
            # A session setting (autocommit: no transaction can roll it back); a schema that does not
            # exist yet is skipped by PostgreSQL until the store creates it.
            conn.execute(pgsql.SQL("SET search_path TO {}, public").format(pgsql.Identifier(schema)))
        except BaseException:
            conn.close()
            raise
    return conn


def first_connection(dsn: str, connect: Callable[[], Any]) -> Any:
    """A store's first connection from ``connect``; ``ValueError`` without the DSN's password when the
    server cannot be reached (a store that never opened is a configuration error, not an outage)."""
    try:
        return connect()
    except psycopg.Error as exc:
        detail = scrub_secret(str(exc), dsn)
        raise ValueError(f"cannot connect to PostgreSQL ({redact_dsn(dsn)}): {detail}".strip()) from None


def live_connection(conn: Any, dsn: str, connect: Callable[[], Any]) -> Any:
    """``conn``, or a new one from ``connect`` when the server restarted or dropped it.

    The statement that noticed the loss has already failed; later calls get a fresh connection instead of
    failing forever. A failed reconnect raises ``psycopg.OperationalError`` without the DSN's password.
    """
    if conn is not None and not conn.broken:
        return conn
    if conn is not None:
        conn.close()
    try:
        return connect()
    except psycopg.Error as exc:
        detail = scrub_secret(str(exc), dsn)
        raise psycopg.OperationalError(f"PostgreSQL ({redact_dsn(dsn)}) is unreachable: {detail}") from None


@contextmanager
def scrubbed_errors(dsn: str) -> Iterator[None]:
    """Re-raise a ``psycopg.OperationalError`` from the block with the DSN's password scrubbed."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise psycopg.OperationalError(scrub_secret(str(exc), dsn)) from None


class PgConnector:
    """Opens connections to one PostgreSQL database for one store.

    ``dsn``: a libpq connection string or URI (it may hold a password: never logged or echoed);
    ``schema``: every connection's ``search_path`` starts there (``public`` = the DSN's own settings);
    ``connect_timeout_s``: how long one connection attempt may take (libpq counts whole seconds, at least
    two). Raises ``ValueError`` for an empty DSN, a non-positive timeout or a missing [postgres] extra.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        what: str = "the PostgreSQL store",
    ) -> None:
        require_psycopg(what)
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn is empty; give a PostgreSQL DSN such as postgresql://user@host:5432/db")
        self.dsn = dsn
        self.schema = schema
        self.connect_timeout = _timeout_s(connect_timeout_s)

    @property
    def redacted(self) -> str:
        """The DSN without its password, for messages and logs."""
        return redact_dsn(self.dsn)

    def scrub(self, message: str) -> str:
        """``message`` without the DSN's password."""
        return scrub_secret(message, self.dsn)

    def connect(self) -> Any:
        """A new autocommit connection; the driver's own errors pass through (see ``first``/``live``)."""
        return connect_in_schema(self.dsn, self.schema, self.connect_timeout)

    def first(self) -> Any:
        """The first connection; ``ValueError`` (password scrubbed) when the server cannot be reached."""
        return first_connection(self.dsn, self.connect)

    def live(self, conn: Any) -> Any:
        """``conn`` while it works, else a new connection (``psycopg.OperationalError``, scrubbed, while the
        server stays unreachable)."""
        return live_connection(conn, self.dsn, self.connect)

    def errors(self) -> Any:
        """A context manager that scrubs the password from ``psycopg.OperationalError`` raised inside."""
        return scrubbed_errors(self.dsn)
