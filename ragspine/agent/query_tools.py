"""``query_metric``: the structured channel's one tool, and its schemas for OpenAI / Anthropic tool calling.

The result is a dict whose ``status`` is exactly one of:

* ``unrecognized_param`` — ``param`` names the input that is not in the controlled vocabulary and ``raw``
  repeats it; nothing is guessed.
* ``not_found`` — ``normalized`` holds the normalised lookup (metric_code, entity, geography,
  period_type, period, channel) and ``message`` is :data:`NOT_FOUND_MESSAGE`, a fixed refusal with no
  number in it. A RESTRICTED fact answers exactly like a missing one.
* ``found`` — ``value``/``unit`` and every dimension come from the stored fact (never from the
  question), with ``source: {doc, locator}``; ``answer`` is prose rebuilt from those fields only.

A store answer is checked before it is trusted: a fact whose dimensions are not the ones asked for, that
has no source, or that is RESTRICTED is discarded, so a store that invents or mixes up a number cannot
turn it into a ``found``.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from ragspine.common.company_profile import DomainProfile
from ragspine.common.glossary import Vocabulary, resolve_relative_period, vocabulary
from ragspine.common.sensitivity import RESTRICTED
from ragspine.storage.fact_store import Fact, FactStore

STATUS_FOUND = "found"
STATUS_NOT_FOUND = "not_found"
STATUS_UNRECOGNIZED = "unrecognized_param"
STATUSES: tuple[str, ...] = (STATUS_FOUND, STATUS_NOT_FOUND, STATUS_UNRECOGNIZED)

#: The refusal of a failed lookup. Fixed text, no digits: a model cannot be handed a number to repeat.
NOT_FOUND_MESSAGE = (
    "No approved figure is recorded for this metric, entity, period and channel. "
    "The figure cannot be stated; do not estimate or substitute one."
)

TOOL_NAME = "query_metric"
_DESCRIPTION = (
    "Look up one reported figure (a metric for an entity, period and channel) in the fact store. "
    "Returns status found (value, unit and its source document), not_found (no figure exists: say so, "
    "never estimate) or unrecognized_param (the named input is not a known metric, entity, period or "
    "channel)."
)


def _parameters(profile: DomainProfile | None) -> dict[str, object]:
    vocab = vocabulary(profile)
    metric_spec = vocab.profile.dimension("metric")
    channel_spec = vocab.profile.dimension("channel")
    metrics = metric_spec.codes() if metric_spec else []
    channels = channel_spec.codes() if channel_spec else ["TOTAL"]
    entities = vocab.profile.entity_codes()
    return {
        "type": "object",
        "properties": {
            "metric": {
                "type": "string",
                "description": "Metric code or name (codes: " + ", ".join(metrics) + ").",
            },
            "entity": {
                "type": "string",
                "description": "Entity code or name (codes: " + ", ".join(entities) + ").",
            },
            "period": {
                "type": "string",
                "description": "Period: 2025Q3, FY2024, 2025H1, 2025-03, or relative (last quarter, 去年).",
            },
            "channel": {
                "type": "string",
                "description": "Channel code or name (codes: " + ", ".join(channels) + "); default TOTAL.",
                "default": vocab.default_channel(),
            },
        },
        "required": ["metric", "entity", "period"],
        "additionalProperties": False,
    }


def build_query_metric_tool_anthropic(profile: DomainProfile | None = None) -> dict[str, object]:
    """The ``query_metric`` tool in Anthropic's tool format (``name``, ``description``, ``input_schema``)."""
    return {"name": TOOL_NAME, "description": _DESCRIPTION, "input_schema": _parameters(profile)}


def build_query_metric_tool_openai(profile: DomainProfile | None = None) -> dict[str, object]:
    """The ``query_metric`` tool in OpenAI's function-tool format."""
    return {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": _DESCRIPTION, "parameters": _parameters(profile)},
    }


QUERY_METRIC_TOOL_ANTHROPIC = build_query_metric_tool_anthropic()
QUERY_METRIC_TOOL_OPENAI = build_query_metric_tool_openai()


def _unrecognized(param: str, raw: object) -> dict[str, object]:
    return {"status": STATUS_UNRECOGNIZED, "param": param, "raw": "" if raw is None else str(raw)}


def _normalized(
    metric: str, entity: str, geography: str, period_type: str, period: str, channel: str
) -> dict[str, str]:
    return {
        "metric_code": metric,
        "entity": entity,
        "geography": geography,
        "period_type": period_type,
        "period": period,
        "channel": channel,
    }


def _matches(fact: object, want: dict[str, str], dimensions: dict[str, str]) -> bool:
    """The store's answer is the fact that was asked for, with a source, and not RESTRICTED."""
    if not isinstance(fact, Fact):
        return False
    if fact.sensitivity == RESTRICTED or not fact.source_doc_id or not fact.source_locator:
        return False
    keys = ("metric_code", "entity", "period_type", "period", "channel")
    if any(getattr(fact, k) != want[k] for k in keys):
        return False
    return all(fact.dimensions.get(k) == v for k, v in dimensions.items())


def _pick(candidates: list[Fact], geography: str, dimensions: dict[str, str]) -> Fact | None:
    """One fact among the matches: the entity's own geography and exactly the asked dimensions first."""
    if not candidates:
        return None
    exact = [f for f in candidates if f.dimensions == dimensions]
    pool = exact or candidates
    home = [f for f in pool if f.geography == geography]
    return (home or pool)[0]


def _answer(fact: Fact, vocab: Vocabulary) -> str:
    spec = vocab.profile.dimension("metric")
    label = (spec.labels.get(fact.metric_code) if spec else None) or fact.metric_code
    entity = vocab.profile.home_entity_labels.get(fact.entity, fact.entity)
    channel = "" if fact.channel == vocab.default_channel() else f", channel {fact.channel}"
    return (
        f"{label} of {entity} for {fact.period}{channel}: {fact.value:g} {fact.unit} "
        f"(source: {fact.source_doc_id}, {fact.source_locator})"
    )


def _found(fact: Fact, vocab: Vocabulary) -> dict[str, object]:
    return {
        "status": STATUS_FOUND,
        "value": fact.value,
        "unit": fact.unit,
        "metric_code": fact.metric_code,
        "entity": fact.entity,
        "geography": fact.geography,
        "channel": fact.channel,
        "period_type": fact.period_type,
        "period": fact.period,
        "valid_as_of": fact.valid_as_of,
        "ingested_at": fact.ingested_at,
        "source": {"doc": fact.source_doc_id, "locator": fact.source_locator},
        "answer": _answer(fact, vocab),
    }


def _lookup(
    store: FactStore,
    vocab: Vocabulary,
    dims: dict[str, str],
    reference_date: date | None,
) -> dict[str, object]:
    raw_metric = dims.get("metric", "")
    metric = vocab.normalize_metric(raw_metric)
    if metric is None:
        return _unrecognized("metric", raw_metric)
    raw_entity = dims.get("entity", "")
    entity = vocab.normalize_entity(raw_entity)
    if entity is None:
        return _unrecognized("entity", raw_entity)
    raw_period = dims.get("period", "")
    period = resolve_relative_period(raw_period, reference_date)
    if period is None:
        return _unrecognized("period", raw_period)
    raw_channel = dims.get("channel", "")
    channel = vocab.normalize_channel(raw_channel) if str(raw_channel).strip() else vocab.default_channel()
    if channel is None:
        return _unrecognized("channel", raw_channel)
    extra: dict[str, str] = {}
    for name, raw in dims.items():
        if name in ("metric", "entity", "period", "channel"):
            continue
        if name == "geography":
            continue
        code = vocab.normalize_dimension(name, raw)
        if code is None:
            return _unrecognized(name, raw)
        extra[name] = code
    geography = str(dims.get("geography") or "") or (vocab.geography_for_entity(entity) or "")
    want = _normalized(metric, entity, geography, period[0], period[1], channel)
    candidates = [
        f for f in store.query(metric, entity, period[0], period[1], channel) if _matches(f, want, extra)
    ]
    if dims.get("geography"):
        candidates = [f for f in candidates if f.geography == geography]
    fact = _pick(candidates, geography, extra)
    if fact is None:
        return {"status": STATUS_NOT_FOUND, "normalized": want, "message": NOT_FOUND_MESSAGE}
    return _found(fact, vocab)


def execute_query_metric(
    store: FactStore, metric: str, entity: str, period: str, channel: str = "TOTAL"
) -> dict[str, object]:
    """Run ``query_metric`` with the deployment's glossary; relative periods count from today."""
    return _lookup(
        store,
        vocabulary(None),
        {"metric": metric, "entity": entity, "period": period, "channel": channel},
        None,
    )


def execute_fact_query(store: FactStore, profile: DomainProfile, **dims: str) -> dict[str, object]:
    """Run ``query_metric`` through ``profile``'s vocabularies. ``dims`` holds ``metric``, ``entity``,
    ``period``, optionally ``channel``, ``geography``, any other dimension of the profile, and
    ``reference_date`` (ISO date) for relative periods. An unknown dimension name is an
    ``unrecognized_param`` like an unknown value."""
    params = dict(dims)
    reference: date | None = None
    raw_reference = params.pop("reference_date", None)
    if raw_reference:
        try:
            reference = date.fromisoformat(str(raw_reference))
        except ValueError:
            return _unrecognized("reference_date", raw_reference)
    vocab = Vocabulary(profile)
    known = {"metric", "entity", "period", "channel", "geography", *(d.name for d in profile.dimensions)}
    for name in params:
        if name not in known:
            return _unrecognized(name, params[name])
    for name in ("metric", "entity", "period"):
        if not str(params.get(name) or "").strip():
            return _unrecognized(name, params.get(name, ""))
    return _lookup(store, vocab, {k: str(v) for k, v in params.items()}, reference)


def result_status(result: dict[str, Any]) -> str:
    """The status of a ``query_metric`` result; ``ValueError`` unless it is exactly one of the three."""
    status = result.get("status")
    if status not in STATUSES:
        raise ValueError(f"query_metric result has status {status!r}, not one of {', '.join(STATUSES)}")
    return str(status)
