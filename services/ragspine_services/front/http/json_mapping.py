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



# Parsing: a JSON object whose every member is a plain scalar (string, int, bool, finite float for a
# double) or a list of strings, each under its proto field name, is set directly; anything else (message,
# map, enum, bytes, oneof and float32 fields, camelCase names, nulls, numbers in strings, values out of
# range, unpaired surrogates) returns None and the caller uses ``json_format.ParseDict``, which also gives
# the error for a malformed body. So the answer (message or error) is ParseDict's, at less cost for the
# bodies sent per query (``{"query", "libraries", "top_k"}``).
_PLAIN: dict[str, dict[str, tuple[str, type]]] = {}  # per message type: name -> (kind, Python type)
_PLAIN_SCALARS = {
    FieldDescriptor.CPPTYPE_STRING: str,
    FieldDescriptor.CPPTYPE_INT32: int,
    FieldDescriptor.CPPTYPE_INT64: int,
    FieldDescriptor.CPPTYPE_UINT32: int,
    FieldDescriptor.CPPTYPE_UINT64: int,
    FieldDescriptor.CPPTYPE_BOOL: bool,
    FieldDescriptor.CPPTYPE_DOUBLE: float,
}


def _plain_fields(descriptor: Any) -> dict[str, tuple[str, type]]:
    json_names = {f.json_name: f for f in descriptor.fields}
    plain: dict[str, tuple[str, type]] = {}
    for field in descriptor.fields:
        if json_names.get(field.name, field) is not field or field.containing_oneof is not None:
            continue  # the name is another field's JSON name, or a oneof member: ParseDict decides
        if field.type == FieldDescriptor.TYPE_BYTES or field.is_extension:
            continue
        kind = _PLAIN_SCALARS.get(field.cpp_type)
        if kind is None or (field.is_repeated and kind is not str) or _is_map(field):
            continue
        plain[field.name] = ("list" if field.is_repeated else "scalar", kind)
    return plain


def _plain_str(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")  # a surrogate code point in a str is an unpaired one
    except UnicodeEncodeError:
        return False
    return True


def _plain_scalar(value: Any, kind: type) -> bool:
    # Exact types: bool is not int here, int is not float (ParseDict converts those).
    if kind is str:
        return type(value) is str and _plain_str(value)
    if kind is float:
        return type(value) is float and math.isfinite(value)
    return type(value) is kind


def json_to_message(data: dict[str, Any], message_type: type[Message]) -> Message | None:
    """``data`` (a JSON object) as a ``message_type``, when every member is a plain field (see above);
    else None (nothing here raises for a malformed body: ParseDict then reports it)."""
    descriptor = message_type.DESCRIPTOR
    plain = _PLAIN.get(descriptor.full_name)
    if plain is None:
        plain = _PLAIN[descriptor.full_name] = (
            {} if descriptor.file.package == "google.protobuf" else _plain_fields(descriptor)
        )
    message = message_type()
    try:
        for name, value in data.items():
            entry = plain.get(name)
            if entry is None:
                return None
            shape, kind = entry
            if shape == "list":
                if type(value) is not list or not all(type(v) is str and _plain_str(v) for v in value):
                    return None
                getattr(message, name).extend(value)
            elif not _plain_scalar(value, kind):
                return None
            else:
                setattr(message, name, value)
    except (ValueError, TypeError, OverflowError):
        return None  # e.g. an int out of the field's range
    return message
