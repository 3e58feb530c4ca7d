"""A tiny real HTTP client (urllib) and the metadata corpus the Dify contract tests run on."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

ADMIN = "tok-admin"  # every library, every scope
READER_A = "tok-reader-a"  # read on lib-a only
OTHER = "tok-other"  # lib-b only

TOKENS = {
    ADMIN: {"caller": "admin", "libraries": ["*"]},
    READER_A: {"caller": "reader", "libraries": ["lib-a"], "scopes": ["read"]},
    OTHER: {"caller": "other", "libraries": ["lib-b"]},
}


def call(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = ADMIN,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """``(status, parsed JSON body)`` of one request; HTTP errors are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"content-type": content_type, **(headers or {})}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_http(base: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{base} did not answer /healthz within {timeout_s}s")


def s(v: str) -> dict[str, Any]:
    return {"string_value": v}


def n(v: float) -> dict[str, Any]:
    return {"number_value": v}


def d(v: str) -> dict[str, Any]:
    return {"date_value": v}


def lst(*v: str) -> dict[str, Any]:
    return {"list_value": {"values": list(v)}}


# Every document says "alpha report", so the query "alpha report" reaches all of them and the filter alone
# decides which come back.
META_DOCS: list[dict[str, Any]] = [
    {
        "doc_id": "d1",
        "title": "Harvest robots",
        "text": "Alpha report on harvesting robots in greenhouses.",
        "metadata": {
            "category": s("robotics"),
            "tags": lst("ai", "hardware"),
            "year": n(2021),
            "published": d("2021-03-01"),
            "note": s("first"),
        },
    },
    {
        "doc_id": "d2",
        "title": "Greenhouse sensors",
        "text": "Alpha report on humidity sensors for greenhouses.",
        "metadata": {
            "category": s("sensors"),
            "tags": lst("hardware"),
            "year": n(2023),
            "published": d("2023-07-15"),
        },
    },
    {
        "doc_id": "d3",
        "title": "Supply contracts",
        "text": "Alpha report on supply contracts with growers.",
        "metadata": {
            "category": s("finance"),
            "tags": lst("legal"),
            "year": n(2019),
            "published": d("2019-11-30"),
            "note": s("third"),
        },
    },
    {
        "doc_id": "d4",
        "title": "Old tractors",
        "text": "Alpha report on tractors kept in service.",
        "metadata": {"category": s("robotics-legacy"), "year": n(2024)},
    },
    {
        "doc_id": "secret",
        "title": "Board minutes",
        "text": "Alpha report on the board restructuring, harvesting robots and greenhouses.",
        "sensitivity": "RESTRICTED",
        "metadata": {"category": s("robotics"), "year": n(2021), "note": s("restricted")},
    },
]
