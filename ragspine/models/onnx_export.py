"""Exporting packaged torch models to ONNX once, into the cache folder, for the onnxruntime backends."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragspine.models.onnx_graph import atomic_target, write_atomic
from ragspine.models.packaged import cache_dir, require

logger = logging.getLogger(__name__)

_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _load_for_export(model_dir: Path, auto_class: str, what: str, **options: Any) -> Any:
    """``transformers.<auto_class>.from_pretrained(model_dir, **options)``; ``ValueError`` naming ``what``
    and the folder when it cannot be loaded."""
    transformers = require("transformers")
    try:
        return getattr(transformers, auto_class).from_pretrained(str(model_dir), **options)
    except Exception as exc:  # transformers raises OSError/ValueError/KeyError depending on what is missing
        raise ValueError(f"cannot load {what} from {str(model_dir)!r} for ONNX export: {exc}") from exc


def _export_traced(
    inner: Any,
    output: Callable[[Any, Any], Any],
    out_file: Path,
    output_name: str,
    output_axes: dict[int, str],
    *,
    head: Any = None,
) -> Path:
    """Export ``inner`` (a transformers model) to fp32 ONNX behind the three BERT inputs (batch, sequence)
    int64; the graph's one output, ``output_name``, is ``output(inner's outputs, attention_mask)``.

    ``head``: a module that ``output`` applies (registered beside ``inner``, so its weights are the
    graph's). Written beside ``out_file`` and renamed into place.
    """
    torch = require("torch")

    class _Traced(torch.nn.Module):  # type: ignore[name-defined]  # fixed signature for the tracer
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            if head is not None:
                self.head = head

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            outputs = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return output(outputs, attention_mask)

    module = _Traced()
    out_file.parent.mkdir(parents=True, exist_ok=True)
    sample = torch.ones(2, 8, dtype=torch.long)
    axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in _INPUTS}
    axes[output_name] = output_axes
    with atomic_target(out_file, suffix=".onnx") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (sample, sample, torch.zeros_like(sample)),
            tmp,
            input_names=_INPUTS,
            output_names=[output_name],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    logger.info("exported %s", out_file)
    return out_file


def export_encoder(model_dir: Path, out_file: Path | None = None) -> Path:
    """Export a BERT-style encoder (``last_hidden_state`` output) to fp32 ONNX; reuse the file when present.

    Default target: ``<cache>/onnx/<folder>-<tag>-fp32.onnx``. Raises ``ValueError`` without a model.
    """
    target = out_file or cache_dir() / "onnx" / f"{model_dir.name}-{_tag(model_dir)}-fp32.onnx"
    if target.is_file():
        return target
    model = _load_for_export(model_dir, "AutoModel", "encoder")
    return _export_traced(
        model,
        lambda out, _mask: out.last_hidden_state,
        target,
        "last_hidden_state",
        {0: "batch", 1: "sequence"},
    )


def export_splade(model_dir: Path, out_file: Path | None = None) -> Path:
    """Export a masked-LM as a SPLADE encoder: ``(batch, vocab)`` = max over tokens of log1p(relu(logits)).

    Pooling inside the graph keeps the (batch, seq, vocab) logits off the Python side.
    """
    target = (
        out_file
        or cache_dir() / "onnx" / f"{model_dir.parent.name}-{model_dir.name}-{_tag(model_dir)}-splade.onnx"
    )
    if target.is_file():
        return target
    torch = require("torch")
    model = _load_for_export(model_dir, "AutoModelForMaskedLM", "masked-LM")

    def pool(out: Any, attention_mask: Any) -> Any:
        weights = torch.log1p(torch.relu(out.logits)) * attention_mask.unsqueeze(-1)  # (batch, seq, vocab)
        return weights.max(dim=1).values  # (batch, vocab)

    return _export_traced(model, pool, target, "term_weights", {0: "batch"})


def _tag(model_dir: Path) -> str:
    # Keyed by the weights' size and mtime so an upgraded package re-exports instead of reusing stale graphs.
    weights = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin"))
    if not weights:
        return "0"
    st = weights[0].stat()
    return f"{st.st_size:x}{int(st.st_mtime):x}"


def quantise_int8(fp32_file: Path, out_file: Path | None = None) -> Path:
    """Dynamic int8 quantisation of an fp32 ONNX graph with onnxruntime; reuse the file when present.

    Weights become int8 with one scale per output channel (per-tensor scales lose too much on encoders
    whose rows differ in range); activations are quantised per batch at run time. Default target:
    ``<name>_int8.onnx`` beside the input. Written to a temporary file and renamed, so an interrupted run
    leaves nothing that later loads. Raises ``ValueError`` when the input is missing or not a valid graph.
    """
    target = out_file or fp32_file.with_name(f"{fp32_file.stem}_int8.onnx")
    if target.is_file():
        return target
    if not fp32_file.is_file():
        raise ValueError(f"ONNX model {str(fp32_file)!r} does not exist; nothing to quantise")
    quantization = require("onnxruntime.quantization")
    with atomic_target(target, suffix=".onnx") as tmp:
        # The library logs a pre-processing suggestion on the root logger on every call; it does not
        # apply to dynamic quantisation of a transformer, so that one message is dropped.
        root = logging.getLogger()
        root.addFilter(_drop_preprocess_hint)
        try:
            quantization.quantize_dynamic(
                str(fp32_file), tmp, weight_type=quantization.QuantType.QInt8, per_channel=True
            )
        except Exception as exc:  # onnx/onnxruntime raise their own types for unreadable graphs
            raise ValueError(f"ONNX model {str(fp32_file)!r} could not be quantised: {exc}") from exc
        finally:
            root.removeFilter(_drop_preprocess_hint)
    logger.info("quantised %s", target)
    return target


def _drop_preprocess_hint(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Please consider to run pre-processing before quantization")


def minilm_qint8(folder: Path | None = None) -> Path:
    """all-MiniLM-L6-v2 with integer matrix products, made once from the packaged safetensors.

    The packaged weights are exported to fp32 ONNX (:func:`export_encoder`) and quantised with
    activations scaled per token (:func:`ragspine.models.onnx_token_quant.quantise_per_token`: int8
    weights per output column, each token's activations scaled on their own, so a text's vector does not
    depend on its batch). The result lives in ``folder`` (default ``<cache>/onnx``) as
    ``all-MiniLM-L6-v2-<tag>-qint8tok.onnx`` beside a ``.sha256`` of its bytes. A file whose digest file
    is missing or does not match (a crash, a disk error, an edit) is quantised again; a file lock keeps
    two processes from building it at once. Raises ``ValueError`` when the model cannot be built,
    ``ImportError`` naming the extra without torch/onnxruntime.
    """
    import fcntl

    from ragspine.models.onnx_token_quant import quantise_per_token
    from ragspine.models.packaged import minilm_dir

    model_dir = minilm_dir()
    target = _qint8_target(folder)
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if target.is_file():
                if _matches_digest(target):
                    return target
                logger.warning("cached model %s does not match its digest; quantising it again", target)
                target.unlink()
            fp32 = export_encoder(model_dir)
            try:
                quantise_per_token(fp32, target)
            except ValueError:  # an unreadable cached fp32 export: export it again, once
                fp32.unlink(missing_ok=True)
                quantise_per_token(export_encoder(model_dir), target)
            write_atomic(_digest_file(target), (_sha256(target) + "\n").encode())
            return target
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _qint8_target(folder: Path | None) -> Path:
    """Where :func:`minilm_qint8` keeps its model (the folder is created)."""
    from ragspine.models.packaged import minilm_dir

    out_dir = folder or cache_dir() / "onnx"
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"all-MiniLM-L6-v2-{_tag(minilm_dir())}-qint8tok.onnx"


def _digest_file(model: Path) -> Path:
    return model.with_name(model.name + ".sha256")


def _matches_digest(model: Path) -> bool:
    """True when ``model`` and its ``.sha256`` both exist and agree (a finished, undamaged build)."""
    try:
        return _digest_file(model).read_text().strip() == _sha256(model)
    except OSError:
        return False


# The command that builds the integer MiniLM in a child process (``minilm_qint8_isolated``).
_CHILD = [sys.executable, "-m", "ragspine.models.onnx_export", "minilm-qint8"]
_CHILD_TIMEOUT_S = 900.0


def minilm_qint8_isolated(folder: Path | None = None) -> Path:
    """:func:`minilm_qint8`, with the build (torch, ~0.8 GB at its peak) in a child process.

    A model already in the cache with a matching digest is returned at once, in this process. Otherwise a
    child process builds it, so the caller (a server that runs for weeks) never holds torch in memory
    for having started once on an empty cache. Raises ``OSError`` when the folder cannot be created and
    ``ValueError`` with the child's last words when the build fails.
    """
    target = _qint8_target(folder)
    if _matches_digest(target):
        return target
    import ragspine

    env = dict(os.environ)
    # The child imports this package from where the parent did, whatever its sys.path was made of.
    root = str(Path(ragspine.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    logger.info("building the integer MiniLM into %s (once; ~10 s)", target.parent)
    try:
        done = subprocess.run(
            [*_CHILD, str(target.parent)],
            capture_output=True,
            text=True,
            env=env,
            timeout=_CHILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"the integer MiniLM could not be built: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ValueError(f"the integer MiniLM could not be built: {last}")
    built = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else target
    if built != target or not target.is_file():
        raise ValueError(f"the integer MiniLM build reported {str(built)!r}, expected {str(target)!r}")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m ragspine.models.onnx_export minilm-qint8 FOLDER``: build the integer MiniLM into
    FOLDER and print its path (what :func:`minilm_qint8_isolated` runs)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ragspine.models.onnx_export", description=main.__doc__)
    parser.add_argument("model", choices=["minilm-qint8"])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    print(minilm_qint8(args.folder))
    return 0


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    raise SystemExit(main())
