# syntax=docker/dockerfile:1
# CPU image: the front tier (and the model worker on CPU with `cpuOnly: true`). One image, role by command:
#   docker run IMAGE serve front    # gRPC 50051
#   docker run IMAGE serve worker   # gRPC 50052, in-process CPU models

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for the package's compiled BM25 kernel (this stage only; the runtime image has none).
# Distribution package versions follow the base image's security updates; pinning them breaks rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The CPU torch wheel first: the default Linux wheel on PyPI is the multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY proto/ proto/
COPY ragspine/ ragspine/
COPY services/ services/
COPY clients/ clients/
# The gRPC stubs are regenerated from proto/ here so the image never ships stubs older than its protos.
# psycopg alone, not the [postgres] extra: in a cluster the database is external, no bundled server needed.
RUN pip install grpcio-tools==1.85.1 mypy-protobuf==5.1.0 \
    && python services/ragspine_services/gen_protos.py && python clients/python/sync_stubs.py \
    && pip install "/src[service,http,models,tracing,facts,qdrant]" "psycopg[binary]==3.3.9" \
    && python -c "from ragspine.retrieval.channels.inverted_index import compiled_kernel_available as built; assert built(), 'the compiled BM25 kernel was not built'" \
    && pip uninstall -y grpcio-tools mypy-protobuf

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ragspine" \
      org.opencontainers.image.description="RAGSpine retrieval service, CPU image" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 ragspine \
    && useradd --system --uid 10001 --gid ragspine --home-dir /var/lib/ragspine --no-create-home ragspine \
    && mkdir -p /var/lib/ragspine /models \
    && chown ragspine:ragspine /var/lib/ragspine /models
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/models \
    XDG_CACHE_HOME=/var/lib/ragspine/cache \
    RAGSPINE_DATA_DIR=/var/lib/ragspine \
    RAGSPINE_HOST=0.0.0.0 \
    RAGSPINE_METRICS_PORT=9100 \
    RAGSPINE_DEVICE=cpu
VOLUME ["/var/lib/ragspine", "/models"]
USER 10001:10001
WORKDIR /var/lib/ragspine
EXPOSE 50051 50052 9100
ENTRYPOINT ["ragspine"]
CMD ["serve", "front"]
