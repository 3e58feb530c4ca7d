"""Retrieval outputs are exactly what they were when pinned, on every surface, mode and chunker.

``tests/conformance/pin_outputs.py`` defines the matrix (library API, ``ragspine eval``, the gRPC front;
economy / auto / sparse / hybrid_sparse; every chunker; the sample corpus and SciFact / CMRC subsets) and
records it; ``pinned/retrieval_outputs.json`` holds the digests recorded before the core refactor. Each
group of configurations is recomputed here and compared: any change to an id, the order, a score bit, a
provenance field or a response flag fails, naming the configuration, the first query that changed and
which part of its answer changed (ranking, scores, provenance, other fields).

Groups that load a packaged model are marked ``slow``; groups on SciFact / CMRC need ``shared_data`` (they
skip with the reason without it; CI fails on skips). Reverse proof: one score one ulp off, two snippets
swapped, a changed locator, a dropped answer or a flipped response flag changes the digest and the
comparer reports it with the configuration and the query.

An intended change of output: regenerate with ``python -m tests.conformance.pin_outputs --write
--overwrite`` (it prints every configuration, and which ones changed) and review the diff.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragspine.retrieval.chunking.chunker import CHUNKER_NAMES
from ragspine.settings import RETRIEVAL_MODES
from tests.conformance import pin_outputs as po


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    if not po.PINNED_FILE.is_file():
        pytest.fail(f"{po.PINNED_FILE} is missing; record it with: {po.REGENERATE}")
    return po.load_pinned()


def _group_params() -> Iterator[Any]:
    for group in po.MATRIX:
        marks = [pytest.mark.slow] if group.models else []
        yield pytest.param(group.name, marks=marks, id=group.name)


@pytest.mark.parametrize("group_name", list(_group_params()))
def test_outputs_match_pinned(
    group_name: str, pinned: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    group = po.GROUPS[group_name]
    if group.models:
        pytest.importorskip("onnxruntime", reason="the packaged models need the models extra")
    if group_name.startswith("grpc-"):
        pytest.importorskip("grpc", reason="the gRPC front needs the service extra")
    shared: Path | None = None
    if group.corpus != "sample":
        shared = request.getfixturevalue("shared_data")
    recorded = po.record_group(group, tmp_path, shared)
    problems = [
        problem
        for name, entries in recorded.items()
        if (problem := po.compare_config(name, pinned["configs"].get(name), entries)) is not None
    ]
    assert not problems, (
        "\n".join(problems) + f"\nIf this change of output is intended, regenerate: {po.REGENERATE}"
    )


# ------------------------------------------------------------------------------------- the matrix


def test_matrix_covers_every_mode_on_every_surface_and_every_chunker(pinned: dict[str, Any]) -> None:
    # The registry and the presets are what they were when the matrix was written (a new chunker or
    # preset must be added to the matrix and pinned).
    assert tuple(CHUNKER_NAMES) == po.CHUNKERS
    behaviours = {(emb, sparse) for _, emb, sparse in RETRIEVAL_MODES.values()}
    assert {RETRIEVAL_MODES[m][1:] for m in po.MODES} == behaviours
    configs = [c.split("/") for c in po.ALL_CONFIGS]
    for surface in ("library", "eval", "grpc"):
        assert {c[2] for c in configs if c[0] == surface} == set(po.MODES), surface
    assert {c[3] for c in configs if c[0] == "library"} == set(po.CHUNKERS)
    assert {c[3] for c in configs if c[0] == "grpc"} >= set(po.CHUNKERS)
    for corpus in ("sample", *po.SUBSETS):
        assert {c[2] for c in configs if c[0] == "library" and c[1] == corpus} == set(po.MODES), corpus
    # Every configuration of the matrix is pinned, and nothing else is.
    assert sorted(pinned["configs"]) == sorted(po.ALL_CONFIGS)
    assert all(pinned["configs"][c]["answers"] > 0 for c in po.ALL_CONFIGS)


def test_pinned_file_stays_small() -> None:
    assert po.PINNED_FILE.stat().st_size < 1_000_000


# ---------------------------------------------------------------------------------- reverse proof


@pytest.fixture(scope="module")
def economy_sample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[po.Entry]]:
    group = po.GROUPS["library-sample-economy-chunkers"]
    return po.record_group(group, tmp_path_factory.mktemp("reverse"))


CONFIG = "library/sample/economy/default"


def _perturbed(entries: list[po.Entry], key: str, change: Any) -> list[po.Entry]:
    out = []
    for e in entries:
        answer = copy.deepcopy(e.answer)
        if e.key == key:
            change(answer)
        out.append(po.Entry(e.key, e.query, answer))
    return out


def _first_with(entries: list[po.Entry], snippets: int) -> po.Entry:
    return next(e for e in entries if len(e.answer["snippets"]) >= snippets)


def _one_ulp(answer: dict[str, Any]) -> None:
    scores = answer["snippets"][0]["scores"]
    scores["fused"] = math.nextafter(scores["fused"], math.inf)


def _swap(answer: dict[str, Any]) -> None:
    s = answer["snippets"]
    s[0], s[1] = s[1], s[0]


def _locator(answer: dict[str, Any]) -> None:
    answer["snippets"][-1]["source_locator"] += "x"


def _flag(answer: dict[str, Any]) -> None:
    answer["partial"] = True


@pytest.mark.parametrize(
    ("change", "part"),
    [(_one_ulp, "scores"), (_swap, "ids"), (_locator, "provenance"), (_flag, "other")],
    ids=["one-ulp", "swap", "locator", "response-flag"],
)
def test_reverse_proof_comparer_names_the_change(
    economy_sample: dict[str, list[po.Entry]], pinned: dict[str, Any], change: Any, part: str
) -> None:
    entries = economy_sample[CONFIG]
    assert po.compare_config(CONFIG, pinned["configs"][CONFIG], entries) is None  # unchanged: silent
    target = _first_with(entries, 2)
    changed = _perturbed(entries, target.key, change)
    assert po.digest(changed[entries.index(target)].answer) != po.digest(target.answer)
    assert po.pin_config(changed)["digest"] != po.pin_config(entries)["digest"]
    message = po.compare_config(CONFIG, pinned["configs"][CONFIG], changed)
    assert message is not None
    assert CONFIG in message and f"first differing query {target.key!r}" in message
    assert "1 of 16 answers differ" in message
    assert f"changed: {part}" in message, message


def test_reverse_proof_later_query_dropped_or_reordered_is_reported(
    economy_sample: dict[str, list[po.Entry]], pinned: dict[str, Any]
) -> None:
    entries = economy_sample[CONFIG]
    dropped = po.compare_config(CONFIG, pinned["configs"][CONFIG], entries[:-1])
    assert dropped is not None and "1 pinned queries not asked" in dropped and entries[-1].key in dropped
    reordered = po.compare_config(CONFIG, pinned["configs"][CONFIG], [entries[1], entries[0], *entries[2:]])
    assert reordered is not None and "order differs" in reordered
    other = "library/sample/economy/laws"  # the same answers under another configuration's pins
    assert po.compare_config(other, pinned["configs"][other], entries) is not None
    assert "not in the pinned file" in str(po.compare_config("library/sample/economy/none", None, entries))


def test_canonical_form_shows_every_bit_and_type() -> None:
    x = 0.1
    assert po.digest({"s": x}) != po.digest({"s": math.nextafter(x, 1.0)})
    assert po.digest({"s": 0.0}) != po.digest({"s": -0.0})
    assert po.digest({"s": 1}) != po.digest({"s": 1.0}) != po.digest({"s": True})
    assert po.digest({"a": 1, "b": 2}) == po.digest({"b": 2, "a": 1})  # keys are sorted: content only
    assert po.digest([1, 2]) != po.digest([2, 1])
    with pytest.raises(TypeError):
        po.canonical_value({"s": object()})
