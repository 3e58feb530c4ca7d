"""The settings the old catch-all ``Settings.extra`` carried are typed fields now, and reach their readers
from their variables: ``RAGSPINE_NARRATIVE_GRAPH`` (make_narrative_graph) and
``RAGSPINE_WORKER_TLS_CA_FILE`` (the front's worker client). ``RAGSPINE_COMPANY_CONFIG`` over a real front:
tests/structured/test_company_config_front.py. Each with the reverse proof that, unset, it changes nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ragspine.common.choices import strict_choices
from ragspine.graph.narrative import NarrativeGraphPipeline, make_narrative_graph
from ragspine.retrieval.llm.providers import DeterministicProvider
from ragspine.settings import Settings


def test_the_narrative_graph_variable_reaches_make_narrative_graph() -> None:
    chosen = Settings.from_env({"RAGSPINE_NARRATIVE_GRAPH": "llm"})
    assert chosen.narrative_graph == "llm"
    pipeline = make_narrative_graph(provider=DeterministicProvider(), settings=chosen)
    assert isinstance(pipeline, NarrativeGraphPipeline)
    with strict_choices(), pytest.raises(ValueError, match="needs an LLM provider"):
        make_narrative_graph(settings=chosen)
    assert make_narrative_graph(provider=DeterministicProvider(), settings=Settings.from_env({})) is None


@pytest.fixture()
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed, so no test certificate can be made")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_the_worker_ca_variable_makes_the_front_speak_tls_to_the_worker(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    pytest.importorskip("grpc")
    from ragspine_services.front.remote import RemoteEmbeddingBackend
    from ragspine_services.front.server import build_front_parts
    from ragspine_services.worker.models import ModelFactories, ModelRegistry
    from ragspine_services.worker.server import start_worker
    from tests.service.helpers import CountingEmbedding

    cert, key = certificate
    embedding = CountingEmbedding()
    factories = ModelFactories(embedding=lambda spec: embedding)
    registry = ModelRegistry(embedding_spec="fake", factories=factories)
    running = start_worker(registry, host="localhost", tls_cert_file=str(cert), tls_key_file=str(key))
    env = {
        "RAGSPINE_WORKER_ADDRESS": f"localhost:{running.port}",
        "RAGSPINE_RETRIEVAL_MODE": "economy",
        "RAGSPINE_DATA_DIR": str(tmp_path / "data"),
    }
    try:
        parts = build_front_parts(Settings.from_env({**env, "RAGSPINE_WORKER_TLS_CA_FILE": str(cert)}))
        try:
            assert parts.worker is not None and parts.worker.alive(timeout_s=10)
            assert len(RemoteEmbeddingBackend(parts.worker).embed_texts(["over tls"])[0]) == 8
        finally:
            parts.close()
        # Reverse proof: without the CA the front talks plaintext, which the TLS worker does not answer.
        plain = build_front_parts(Settings.from_env(env))
        try:
            assert plain.worker is not None and not plain.worker.alive(timeout_s=2)
        finally:
            plain.close()
    finally:
        running.stop(0)
    assert embedding.seen == ["over tls"]
