"""The proto3 JSON mapping of a message (snake_case field names), the same dict as
``json_format.MessageToDict(message, preserving_proto_field_name=True)`` at a fraction of its cost.

``json_format`` decides per field and per value, in Python, how to print it; here each field descriptor
gets its converter once (cached) and a message is printed from ``ListFields()`` (set fields only, in field
number order, computed in C), so a ``RetrieveResponse`` with ten snippets costs a few dict inserts per set
field. Well-known types (``google.protobuf.*``: Timestamp, Struct, wrappers, ...) are handed to
``json_format`` itself; enum values print by name (ragspine.v1 gives none a custom JSON name).
``tests/http/test_json_mapping.py`` holds it equal to ``json_format`` for every REST message.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal import type_checkers
from google.protobuf.message import Message

_Convert = Callable[[Any], Any]
_FIELDS: dict[FieldDescriptor, tuple[str, _Convert]] = {}
_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)
_FLOATS = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)


def message_to_json(message: Message) -> dict[str, Any]:
    """``message`` as a JSON-ready dict (proto field names; defaults of fields without presence left out)."""
    out: dict[str, Any] = {}
    fields = _FIELDS
    for field, value in message.ListFields():
        entry = fields.get(field)
        if entry is None:
            entry = fields[field] = _compile(field)
        name, convert = entry
        out[name] = convert(value)
    return out


def _well_known(message: Message) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _is_map(field: Any) -> bool:  # a FieldDescriptor (its optional parts typed loosely)
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.has_options
        and field.message_type.GetOptions().map_entry
    )


def _compile(field: Any) -> tuple[str, _Convert]:
    name = f"[{field.full_name}]" if field.is_extension else field.name
    if _is_map(field):
        value = _value(field.message_type.fields_by_name["value"])

        def convert_map(mapping: Any) -> dict[str, Any]:
            return {
                ("true" if key else "false") if isinstance(key, bool) else str(key): value(mapping[key])
                for key in mapping
            }

        return name, convert_map
    element = _value(field)
    if field.is_repeated:
        return name, lambda values: [element(v) for v in values]
    return name, element


def _identity(value: Any) -> Any:
    return value


def _float(value: float) -> Any:
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    if math.isnan(value):
        return "NaN"
    return value


def _float32(value: float) -> Any:
    if math.isinf(value) or math.isnan(value):
        return _float(value)
    return type_checkers.ToShortestFloat(value)


def _value(field: Any) -> _Convert:
    """The converter of one value of ``field`` (an element, for a repeated field)."""
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_MESSAGE:
        if field.message_type.file.package == "google.protobuf":
            return _well_known
        return message_to_json
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        if field.enum_type.full_name == "google.protobuf.NullValue":
            return lambda _value: None
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda value: names.get(value, value)
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        if field.type == FieldDescriptor.TYPE_BYTES:
            return lambda value: base64.b64encode(value).decode("utf-8")
        return _identity
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return bool
    if cpp in _INT64:
        return str
    if cpp in _FLOATS:
        return _float32 if cpp == FieldDescriptor.CPPTYPE_FLOAT else _float
    return _identity

