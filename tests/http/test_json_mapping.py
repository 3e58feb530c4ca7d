"""``json_mapping.message_to_json`` prints exactly what ``json_format.MessageToDict`` prints (proto field
names), for every REST request and response message, every field set (nested, repeated, maps, int64,
float32, bytes, enums, NaN/Infinity, optional fields set to their default), field order included.

Reverse proof: a converter that prints float32 fields as the raw double (the subtle part of the mapping)
must fail the same checker."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from ragspine_services.front.http import json_mapping
from ragspine_services.front.http.app import REST_ROUTES
from ragspine_services.front.http.json_mapping import message_to_json

MESSAGE_TYPES = sorted(
    {t for r in REST_ROUTES for t in (r.request_type, r.response_type)}, key=lambda t: t.DESCRIPTOR.full_name
)


def _scalar(field: FieldDescriptor, rng: random.Random, depth: int) -> Any:
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values])
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        if field.type == FieldDescriptor.TYPE_BYTES:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        return rng.choice(["a", "ünï", "中文 text", "quote\"and\\slash", "x" * 40])
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if cpp in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return rng.choice([0.1, -2.5, 1e-7, 0.3333333, 123456.789, float("nan"), float("inf"), -float("inf")])
    if cpp in (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_INT32):
        return rng.choice([1, -7, 2**31 - 1]) if cpp == FieldDescriptor.CPPTYPE_INT32 else -(2**40)
    return rng.choice([1, 7, 2**31])  # unsigned


def populate(message: Message, rng: random.Random, depth: int = 0) -> Message:
    """Every field of ``message`` set (two elements per repeated field, two entries per map)."""
    descriptor: Descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and field is not oneof.fields[0] and rng.random() < 0.5:
            continue  # sometimes another member of the oneof wins
        target = getattr(message, field.name)
        if json_mapping._is_map(field):
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            for i in range(2):
                key: Any = _scalar(key_field, rng, depth)
                if isinstance(key, str):
                    key = f"{key}{i}"
                elif isinstance(key, bool):
                    key = bool(i)
                else:
                    key = -3 + 5 * i
                if value_field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                    if depth < 3:
                        populate(target[key], rng, depth + 1)
                else:
                    target[key] = _scalar(value_field, rng, depth)
        elif field.is_repeated:
            for _ in range(2):
                if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                    if depth < 3:
                        populate(target.add(), rng, depth + 1)
                else:
                    target.append(_scalar(field, rng, depth))
        elif field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
            if depth < 3:
                populate(target, rng, depth + 1)
                target.SetInParent()
        elif field.has_presence and rng.random() < 0.3:
            setattr(message, field.name, field.default_value)  # set, yet equal to the default
        else:
            setattr(message, field.name, _scalar(field, rng, depth))
    return message


def check_same_json(convert: Any, message: Message) -> None:
    expected = json_format.MessageToDict(message, preserving_proto_field_name=True)
    got = convert(message)
    # Byte-identical once encoded (key order included); NaN prints the same on both sides.
    assert json.dumps(got, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.DESCRIPTOR.name)
@pytest.mark.parametrize("seed", range(8))
def test_every_rest_message_prints_as_json_format_does(message_type: type[Message], seed: int) -> None:
    check_same_json(message_to_json, populate(message_type(), random.Random(seed)))


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.DESCRIPTOR.name)
def test_an_empty_message_prints_as_json_format_does(message_type: type[Message]) -> None:
    check_same_json(message_to_json, message_type())


def test_the_populated_messages_reach_the_tricky_fields() -> None:
    """The generator above does set int64, float32, bytes, enum and map fields somewhere."""
    kinds: set[str] = set()

    def walk(descriptor: Descriptor, seen: set[str]) -> None:
        if descriptor.full_name in seen:
            return
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            if json_mapping._is_map(field):
                kinds.add("map")
            if field.cpp_type == FieldDescriptor.CPPTYPE_INT64:
                kinds.add("int64")
            if field.cpp_type == FieldDescriptor.CPPTYPE_FLOAT:
                kinds.add("float32")
            if field.type == FieldDescriptor.TYPE_BYTES:
                kinds.add("bytes")
            if field.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
                kinds.add("enum")
            if field.message_type is not None:
                walk(field.message_type, seen)

    seen: set[str] = set()
    for message_type in MESSAGE_TYPES:
        walk(message_type.DESCRIPTOR, seen)
    assert {"map", "int64", "bytes", "enum"} <= kinds, kinds


def _probe_type() -> type[Message]:
    """A message with what ragspine.v1 does not use yet: float32, uint64, bool and int map keys."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    T = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="json_mapping_probe.proto", package="probe", syntax="proto3"
    )
    probe = file.message_type.add(name="Probe")
    for number, (name, kind, label) in enumerate(
        [
            ("f", T.TYPE_FLOAT, T.LABEL_OPTIONAL),
            ("fs", T.TYPE_FLOAT, T.LABEL_REPEATED),
            ("u", T.TYPE_UINT64, T.LABEL_OPTIONAL),
            ("s", T.TYPE_SINT64, T.LABEL_OPTIONAL),
        ],
        start=1,
    ):
        probe.field.add(name=name, number=number, type=kind, label=label)
    for number, (name, key_type) in enumerate([("by_bool", T.TYPE_BOOL), ("by_int", T.TYPE_INT32)], start=10):
        entry = probe.nested_type.add(name=f"{name.title().replace('_', '')}Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=key_type, label=T.LABEL_OPTIONAL)
        entry.field.add(name="value", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
        probe.field.add(
            name=name,
            number=number,
            type=T.TYPE_MESSAGE,
            label=T.LABEL_REPEATED,
            type_name=f".probe.Probe.{entry.name}",
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("probe.Probe"))


@pytest.mark.parametrize("seed", range(8))
def test_float32_uint64_and_non_string_map_keys(seed: int) -> None:
    check_same_json(message_to_json, populate(_probe_type()(), random.Random(seed)))


def _failures(convert: Any) -> int:
    failures = 0
    for message_type in [*MESSAGE_TYPES, _probe_type()]:
        for seed in range(3):
            try:
                check_same_json(convert, populate(message_type(), random.Random(seed)))
            except AssertionError:
                failures += 1
    return failures


def test_reverse_proof_float32_printed_as_double_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_mapping, "_float32", json_mapping._float)
    monkeypatch.setattr(json_mapping, "_FIELDS", {})
    assert _failures(json_mapping.message_to_json), "float32 values printed as doubles went unnoticed"


def test_reverse_proof_unquoted_int64_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_mapping, "_INT64", ())
    monkeypatch.setattr(json_mapping, "_FIELDS", {})
    assert _failures(json_mapping.message_to_json), "int64 values printed as numbers went unnoticed"
