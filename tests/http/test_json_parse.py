"""A REST body parses to what ``json_format.ParseDict`` gives, message or error, whether the plain-body
path (``json_mapping.json_to_message``) takes it or hands it to ParseDict: checked over every REST request
type with bodies of plain values and of every kind ParseDict converts or refuses (bools and floats for
ints, numbers as strings, nulls, camelCase names, unpaired surrogates, out-of-range ints, NaN, nested and
oneof fields, unknown names). Reverse proof: a plain path that takes a bool for an int field (as
``isinstance`` would) is caught by the same check."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ragspine_services._gen import retrieval_pb2
from ragspine_services.front.http import app as http_app
from ragspine_services.front.http import json_mapping
from ragspine_services.front.http.app import REST_ROUTES
from ragspine_services.front.http.calls import CallError

REQUEST_TYPES = sorted(
    {r.request_type for r in REST_ROUTES if r.body == "json"}, key=lambda t: t.DESCRIPTOR.full_name
)
ODD_VALUES: list[Any] = [
    True,
    False,
    None,
    0,
    -1,
    7,
    2**31,
    2**63,
    -(2**70),
    1.0,
    2.5,
    float("nan"),
    float("inf"),
    "",
    "12",
    "tea",
    "ünï 中文",
    "\ud800",
    "a\udc00b",
    [],
    ["a", "b"],
    ["a", 1],
    ["x", None],
    ["\ud800"],
    {},
    {"k": "v"},
]


# Values that are one conversion away from plain: ParseDict converts or refuses each.
NEAR_MISSES: list[Any] = [True, False, None, 1.0, "12", 2**63, "\ud800"]


def _plain_value(field: FieldDescriptor, rng: random.Random) -> Any:
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_MESSAGE:
        return [{}] if field.is_repeated else {}
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        value: Any = rng.choice([v.name for v in field.enum_type.values])
    elif cpp == FieldDescriptor.CPPTYPE_STRING:
        value = rng.choice(["", "tea", "ünï 中文", 'quote"and\\slash'])
    elif cpp == FieldDescriptor.CPPTYPE_BOOL:
        value = rng.random() < 0.5
    elif cpp == FieldDescriptor.CPPTYPE_DOUBLE:
        value = rng.choice([0.0, 0.25, -3.5])
    elif cpp in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64):
        value = rng.choice([0, 3, -2, 2**31 - 1])
    else:
        value = rng.choice([0, 3, 2**32 - 1])
    return [value, value] if field.is_repeated else value


def _outcome(data: Any, message_type: type[Message]) -> tuple[str, Any]:
    try:
        return "ok", http_app._parse(data, message_type, "the body").SerializeToString(deterministic=True)
    except CallError as exc:
        return "error", (exc.code, exc.message)
    except Exception as exc:  # anything else protobuf raises must match too
        return "raised", type(exc).__name__


def _reference(data: Any, message_type: type[Message]) -> tuple[str, Any]:
    try:
        message = json_format.ParseDict(data, message_type())
    except (json_format.ParseError, SystemError, ValueError, TypeError) as exc:
        # What the server words as a 400: protobuf fails on some unpaired surrogates with a SystemError.
        name = message_type.DESCRIPTOR.full_name
        return "error", (http_app._bad("").code, f"the body is not a valid {name}: {exc}")
    except Exception as exc:
        return "raised", type(exc).__name__
    return "ok", message.SerializeToString(deterministic=True)


def _bodies(message_type: type[Message], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    fields = list(message_type.DESCRIPTOR.fields)
    # Half the bodies name only string, integer and bool fields outside oneofs (what a per-query body
    # names), so that an odd value there is often the only thing between the body and the plain path.
    simple = [
        f
        for f in fields
        if f.containing_oneof is None
        and f.cpp_type not in (FieldDescriptor.CPPTYPE_MESSAGE, FieldDescriptor.CPPTYPE_ENUM)
        and f.type != FieldDescriptor.TYPE_BYTES
    ] or fields
    bodies: list[dict[str, Any]] = []
    for i in range(80):
        pool = simple if i % 2 else fields
        body: dict[str, Any] = {}
        for field in rng.sample(pool, rng.randint(1, min(4, len(pool)) if i % 2 else len(pool))):
            roll = rng.random()
            name = field.json_name if roll < 0.1 else field.name
            odd = NEAR_MISSES if i % 2 else ODD_VALUES
            body[name] = rng.choice(odd) if roll > 0.7 else _plain_value(field, rng)
        if rng.random() < 0.05:
            body["no_such_field"] = 1
        bodies.append(body)
    return bodies


# A per-query body with one value a conversion away from plain, in each place.
NEAR_MISS_BODIES: list[dict[str, Any]] = [
    body
    for value in NEAR_MISSES
    for body in (
        {"query": "tea", "libraries": ["lib"], "top_k": value},
        {"query": value, "libraries": ["lib"], "top_k": 3},
        {"query": "tea", "libraries": [value]},
        {"query": "tea", "libraries": value},
    )
]


def check_same_as_parse_dict(message_type: type[Message], bodies: list[dict[str, Any]]) -> int:
    """Every body's outcome equals ParseDict's; returns how many the plain path took."""
    taken = 0
    for body in bodies:
        assert _outcome(body, message_type) == _reference(body, message_type), body
        taken += json_mapping.json_to_message(body, message_type) is not None
    return taken


@pytest.mark.parametrize("message_type", REQUEST_TYPES, ids=lambda t: t.DESCRIPTOR.name)
@pytest.mark.parametrize("seed", range(6))
def test_every_rest_request_parses_as_parse_dict_does(message_type: type[Message], seed: int) -> None:
    check_same_as_parse_dict(message_type, _bodies(message_type, seed))


def test_near_misses_parse_as_parse_dict_does() -> None:
    # Only the two where "12" stands in a string place are plain; ParseDict decides the others.
    assert check_same_as_parse_dict(retrieval_pb2.RetrieveRequest, NEAR_MISS_BODIES) == 2


def test_the_per_query_body_takes_the_plain_path() -> None:
    body = {"query": "tea", "libraries": ["lib-a", "lib-b"], "top_k": 10}
    message = json_mapping.json_to_message(body, retrieval_pb2.RetrieveRequest)
    assert message == retrieval_pb2.RetrieveRequest(query="tea", libraries=["lib-a", "lib-b"], top_k=10)
    bodies = [b for seed in range(6) for b in _bodies(retrieval_pb2.RetrieveRequest, seed)]
    assert check_same_as_parse_dict(retrieval_pb2.RetrieveRequest, bodies) > 20


def test_reverse_proof_a_bool_taken_for_an_int_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = json_mapping.json_to_message

    def lax(data: dict[str, Any], message_type: type[Message]) -> Message | None:
        loose = {k: int(v) if type(v) is bool and k == "top_k" else v for k, v in data.items()}
        return original(loose, message_type)

    monkeypatch.setattr(http_app, "json_to_message", lax)
    with pytest.raises(AssertionError):
        check_same_as_parse_dict(retrieval_pb2.RetrieveRequest, NEAR_MISS_BODIES)
