"""Device, dtype and onnxruntime provider selection."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from ragspine.models import device as dev  # noqa: E402
from ragspine.models.packaged import minilm_int8_onnx, require  # noqa: E402


def test_auto_follows_cuda_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.select_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dev.select_device("auto") == "cuda"
    assert dev.select_device("cuda:1") == "cuda:1"


def test_cpu_is_always_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dev.select_device("CPU") == "cpu"


def test_cuda_without_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        dev.select_device("cuda")


def test_unknown_device_names_the_choices() -> None:
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        dev.select_device("tpu")


def test_dtype_is_half_precision_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert dev.select_dtype("cpu") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert dev.select_dtype("cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert dev.select_dtype("cuda:0") == torch.float16


def test_onnx_providers_put_cuda_first_only_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert dev.onnx_providers("auto") == ["CPUExecutionProvider"]
    with pytest.raises(ValueError, match="onnxruntime-gpu"):
        dev.onnx_providers("cuda")
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert dev.onnx_providers("auto") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert dev.onnx_providers("cpu") == ["CPUExecutionProvider"]


def test_session_records_the_provider_it_really_got() -> None:
    opened = dev.make_onnx_session(minilm_int8_onnx(), device="cpu", threads=1)
    assert opened.provider == "CPUExecutionProvider"
    assert opened.provider == opened.session.get_providers()[0]
    assert opened.threads == 1


def test_session_that_silently_fell_back_to_cpu_is_refused_when_cuda_was_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # onnxruntime accepts a CUDA request and quietly runs on CPU when the CUDA libraries fail to load.
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )

    class FallbackSession:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def get_providers(self) -> list[str]:
            return ["CPUExecutionProvider"]

    monkeypatch.setattr(ort, "InferenceSession", FallbackSession)
    with pytest.raises(ValueError, match="fell back to CPUExecutionProvider"):
        dev.make_onnx_session(minilm_int8_onnx(), device="cuda")
    # Under "auto" the same fallback is accepted and reported truthfully.
    assert dev.make_onnx_session(minilm_int8_onnx(), device="auto").provider == "CPUExecutionProvider"


@pytest.mark.parametrize("threads", [0, -2])
def test_bad_thread_count_is_rejected(threads: int) -> None:
    with pytest.raises(ValueError, match="threads"):
        dev.make_onnx_session(minilm_int8_onnx(), threads=threads)


def test_missing_or_corrupt_onnx_file_names_the_path(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        dev.make_onnx_session(folder / "nope.onnx")
    broken = folder / "broken.onnx"
    broken.write_bytes(b"not a graph")
    with pytest.raises(ValueError, match=r"broken\.onnx"):
        dev.make_onnx_session(broken)


def test_missing_runtime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an uninstalled package looks like
    with pytest.raises(ImportError, match=r"ragspine\[models\]"):
        require("onnxruntime")
    with pytest.raises(ImportError, match=r"ragspine\[models\]"):
        dev.onnx_providers("cpu")


def test_require_returns_the_module() -> None:
    assert require("onnxruntime") is ort
