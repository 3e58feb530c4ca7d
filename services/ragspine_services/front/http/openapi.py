"""The OpenAPI 3.1 document of the HTTP face, built from the proto descriptors of the routes' messages.

Schemas follow the proto3 JSON mapping with the proto's field names: 64-bit integers are strings (the
mapping allows either on input), ``bytes`` are base64 strings, enums are their value names, maps are
objects, ``google.protobuf`` well-known types are not used by ``ragspine.v1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

import ragspine

_REF = "#/components/schemas/"
_INTS64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_INTS32 = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_SFIXED32,
}
_FLOATS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def _scalar(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_MESSAGE:
        message = field.message_type
        assert message is not None
        _add(message, schemas)
        return {"$ref": _REF + message.full_name}
    if t == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        assert enum is not None
        schemas.setdefault(enum.full_name, {"type": "string", "enum": [v.name for v in enum.values]})
        return {"$ref": _REF + enum.full_name}
    if t == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if t == FieldDescriptor.TYPE_STRING:
        return {"type": "string"}
    if t == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    if t in _INTS64:
        return {"type": ["string", "integer"], "format": "int64"}
    if t in _INTS32:
        return {"type": "integer", "format": "int32"}
    if t in _FLOATS:
        return {"type": "number"}
    raise ValueError(f"field {field.full_name}: unsupported proto type {t}")


def _field(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        return {"type": "object", "additionalProperties": _scalar(message.fields_by_name["value"], schemas)}
    one = _scalar(field, schemas)
    if field.is_repeated:
        return {"type": "array", "items": one}
    return one


def _add(descriptor: Descriptor, schemas: dict[str, Any]) -> None:
    name = descriptor.full_name
    if name in schemas:
        return
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
    schemas[name] = schema  # before the fields: messages may refer to themselves
    for field in descriptor.fields:
        schema["properties"][field.name] = _field(field, schemas)
    # proto3 ``optional`` makes a synthetic one-field oneof named "_<field>": not a real choice.
    real_oneofs = [
        o for o in descriptor.oneofs if not (len(o.fields) == 1 and o.name == "_" + o.fields[0].name)
    ]
    if real_oneofs:
        schema["x-oneofs"] = {o.name: [f.name for f in o.fields] for o in real_oneofs}


def message_schemas(descriptors: Sequence[Descriptor]) -> dict[str, Any]:
    """JSON schemas of ``descriptors`` and every message and enum they reach, by full proto name."""
    schemas: dict[str, Any] = {}
    for d in descriptors:
        _add(d, schemas)
    return schemas


def _json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF + ref}}}


_ERROR = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    "required": ["code", "message"],
}
_DIFY_REQUEST = {
    "type": "object",
    "required": ["knowledge_id", "query"],
    "properties": {
        "knowledge_id": {"type": "string", "description": "the library id"},
        "query": {"type": "string"},
        "retrieval_setting": {
            "type": "object",
            "properties": {"top_k": {"type": "integer"}, "score_threshold": {"type": "number"}},
        },
        "metadata_condition": {
            "type": "object",
            "properties": {
                "logical_operator": {"type": "string", "enum": ["and", "or"]},
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "comparison_operator"],
                        "properties": {
                            "name": {"type": ["string", "array"]},
                            "comparison_operator": {"type": "string"},
                            "value": {"type": ["string", "number", "array"]},
                        },
                    },
                },
            },
        },
    },
}
_DIFY_RESPONSE = {
    "type": "object",
    "required": ["records"],
    "properties": {
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["content", "score", "title", "metadata"],
                "properties": {
                    "content": {"type": "string"},
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "title": {"type": "string"},
                    "metadata": {"type": "object"},
                },
            },
        }
    },
}
_DIFY_ERROR = {
    "type": "object",
    "required": ["error_code", "error_msg"],
    "properties": {"error_code": {"type": "integer"}, "error_msg": {"type": "string"}},
}


def openapi_document(routes: Sequence[Any], dify_path: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``routes`` (``routes.RestRoute``) plus the Dify route."""
    schemas = message_schemas(
        [d for r in routes for d in (r.request_type.DESCRIPTOR, r.response_type.DESCRIPTOR)]
    )
    schemas.update(
        {
            "Error": _ERROR,
            "DifyRetrievalRequest": _DIFY_REQUEST,
            "DifyRetrievalResponse": _DIFY_RESPONSE,
            "DifyError": _DIFY_ERROR,
        }
    )
    errors = {
        str(s): {"description": d, "content": _json("Error")}
        for s, d in (
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (429, "RESOURCE_EXHAUSTED"),
            (503, "UNAVAILABLE"),
            (504, "DEADLINE_EXCEEDED"),
        )
    }
    paths: dict[str, Any] = {}
    for r in routes:
        op: dict[str, Any] = {
            "operationId": r.path.strip("/").replace("/", "_").replace("{", "").replace("}", ""),
            "summary": r.summary,
            "x-rpc": f"{r.service}/{r.rpc}",
            "responses": {
                "200": {"description": "OK", "content": _json(r.response_type.DESCRIPTOR.full_name)},
                **errors,
            },
        }
        ref = r.request_type.DESCRIPTOR.full_name
        if r.body == "json":
            op["requestBody"] = {"required": True, "content": _json(ref)}
        elif r.body == "ndjson":
            op["requestBody"] = {
                "required": True,
                "content": {"application/x-ndjson": {"schema": {"$ref": _REF + ref}}},
            }
        elif r.body == "multipart":
            op["parameters"] = [
                {"name": "library", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
            op["requestBody"] = {
                "required": True,
                "content": {
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "file": {
                                    "type": "array",
                                    "items": {
                                        "type": "string",
                                        "contentMediaType": "application/octet-stream",
                                    },
                                }
                            },
                        }
                    }
                },
            }
        for method in r.methods:
            paths.setdefault(r.path, {})[method.lower()] = op
    paths[dify_path] = {
        "post": {
            "operationId": "dify_retrieval",
            "summary": "Dify External Knowledge API: knowledge_id = library; score = relevance (0-1).",
            "x-rpc": "ragspine.v1.RetrievalService/Retrieve",
            "requestBody": {"required": True, "content": _json("DifyRetrievalRequest")},
            "responses": {
                "200": {"description": "OK", "content": _json("DifyRetrievalResponse")},
                **{
                    s: {"description": d, "content": _json("DifyError")}
                    for s, d in (
                        ("400", "bad request"),
                        ("403", "1001 / 1002"),
                        ("404", "2001"),
                        ("503", "unavailable"),
                    )
                },
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "RAGSpine HTTP API", "version": ragspine.__version__},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
