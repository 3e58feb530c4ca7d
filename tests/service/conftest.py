"""Fixtures: in-process front and worker servers on loopback with small fakes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from ragspine.settings import Settings
from ragspine_services._gen import retrieval_pb2_grpc
from ragspine_services.common.server import RunningServer
from ragspine_services.front.server import FrontParts, build_front_parts, start_front
from ragspine_services.front.servicer import FrontLimits
from ragspine_services.worker.models import ModelFactories, ModelRegistry
from ragspine_services.worker.server import start_worker
from ragspine_services.worker.servicer import WorkerLimits
from tests.service.helpers import CountingEmbedding, LengthReranker, free_port


@dataclass
class Front:
    running: RunningServer
    parts: FrontParts
    stub: retrieval_pb2_grpc.RetrievalServiceStub
    channel: grpc.Channel

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.running.port}"


@dataclass
class Worker:
    running: RunningServer
    embedding: CountingEmbedding
    reranker: LengthReranker

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.running.port}"


@pytest.fixture()
def make_worker() -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def make(embedding: CountingEmbedding | None = None, limits: WorkerLimits | None = None) -> Worker:
        emb = embedding or CountingEmbedding()
        reranker = LengthReranker()
        registry = ModelRegistry(
            embedding_spec="fake",
            reranker_spec="length",
            factories=ModelFactories(embedding=lambda spec: emb, reranker=lambda spec: reranker),
        )
        worker = Worker(start_worker(registry, token="svc-token", limits=limits), emb, reranker)
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.running.stop(0)


@pytest.fixture()
def make_front(tmp_path: Path) -> Iterator[Callable[..., Front]]:
    started: list[Front] = []

    def make(
        *,
        worker_address: str = "",
        mode: str = "economy",
        reranker: str = "none",
        tokens_file: str = "",
        limits: FrontLimits | None = None,
        data_dir: Path | None = None,
        **settings_kwargs: Any,
    ) -> Front:
        settings = Settings(
            data_dir=str(data_dir or tmp_path / "data"),
            retrieval_mode=mode,
            embedding="deterministic" if not worker_address else "fake",
            reranker=reranker,
            worker_address=worker_address,
            worker_token="svc-token" if worker_address else "",
            auth_tokens_file=tokens_file,
            **settings_kwargs,
        )
        parts = build_front_parts(settings)
        running = start_front(settings, parts, port=free_port(), limits=limits)
        channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
        front = Front(running, parts, retrieval_pb2_grpc.RetrievalServiceStub(channel), channel)
        started.append(front)
        return front

    yield make
    for front in started:
        front.channel.close()
        front.running.stop(0)
        front.parts.close()
