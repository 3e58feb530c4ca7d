"""Tiny randomly initialised models of colpali_engine's own classes, saved the way that package saves them.

colpali_engine checkpoints differ from the transformers-native ``*-hf`` ones: the config is the backbone's
(``qwen2_vl`` / ``paligemma``) and published models such as ``vidore/colqwen2-v1.0`` are PEFT adapters over
a base checkpoint. The backbone sizes come from ``tests.visual.random_models`` (one layer
each side, a character tokenizer), so only the wrapper classes differ from the transformers-native tests.
Imports of colpali_engine happen inside the functions: this module must import where it is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.visual import random_models

FAMILIES = ("colqwen2", "colpali")


def build_engine_model(family: str, *, seed: int = 0) -> tuple[Any, Any]:
    """``(model, processor)`` of colpali_engine's ``ColQwen2`` or ``ColPali`` classes, random weights."""
    import torch

    torch.manual_seed(seed)
    if family == "colqwen2":
        from colpali_engine.models import ColQwen2, ColQwen2Processor
        from transformers import Qwen2VLVideoProcessor

        native = random_models.colqwen2_processor()
        processor: Any = ColQwen2Processor(
            image_processor=native.image_processor,
            tokenizer=native.tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
        )
        model: Any = ColQwen2(random_models.colqwen2_config(native).vlm_config)
    elif family == "colpali":
        from colpali_engine.models import ColPali, ColPaliProcessor

        native = random_models.colpali_processor()
        processor = ColPaliProcessor(image_processor=native.image_processor, tokenizer=native.tokenizer)
        model = ColPali(random_models.colpali_config(native).vlm_config)
    else:
        raise ValueError(f"unknown family {family!r}")
    return model.eval(), processor


def save_engine_model(family: str, path: Path, *, seed: int = 0) -> tuple[Any, Any]:
    """Save a tiny engine model and its processor into ``path``; returns the in-memory pair."""
    model, processor = build_engine_model(family, seed=seed)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return model, processor


def save_lora_adapter(base_dir: Path, adapter_dir: Path, *, seed: int = 1) -> Any:
    """A LoRA adapter over the ColQwen2 base in ``base_dir``, saved like ``vidore/colqwen2-v1.0``.

    The adapter targets the language model's projections and the output projection, as the published
    adapters do. Its B matrices are random (LoRA's usual zero init would make it a no-op), so a loader that
    ignored the adapter would give different vectors. Returns the in-memory PEFT model.
    """
    import torch
    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from peft import LoraConfig, get_peft_model

    base = ColQwen2.from_pretrained(base_dir)  # records base_dir as the adapter's base_model_name_or_path
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=r".*(language_model.*(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
        r"|custom_text_proj)$",
    )
    peft_model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    peft_model.save_pretrained(adapter_dir)
    ColQwen2Processor.from_pretrained(base_dir).save_pretrained(adapter_dir)
    return peft_model.eval()
