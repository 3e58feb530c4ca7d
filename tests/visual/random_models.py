"""Randomly initialised models of the real ColQwen2 / ColPali architectures, for tests and benchmarks.

No package ships a ColPali-family checkpoint and nothing may be downloaded at run time, so tests save a
tiny random model (a character-level tokenizer, one transformer layer each side) and load it through the
same from-path code a real checkpoint takes. Throughput is measured with full-size random models: the
weights do not change the arithmetic. Retrieval quality of any of these models is meaningless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_PALI_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<image>")
# Printable ASCII, one token per character: enough to tokenise any English query deterministically.
_CHARS = tuple(chr(c) for c in range(32, 127))


def _char_tokenizer(specials: tuple[str, ...], unk: str, **named: str) -> Any:
    from tokenizers import Regex, Tokenizer, models
    from tokenizers import pre_tokenizers as pre
    from transformers import PreTrainedTokenizerFast

    tokens = list(specials) + ([unk] if unk not in specials else []) + list(_CHARS)
    vocab = {token: i for i, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    core.pre_tokenizer = pre.Split(pattern=Regex("."), behavior="isolated")
    extra = [t for t in specials if t not in named.values() and t != unk]
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token=unk, additional_special_tokens=extra, **named
    )


def colqwen2_processor(*, min_pixels: int = 56 * 56, max_pixels: int = 224 * 224) -> Any:
    """A ColQwen2 processor with the character tokenizer; ``max_pixels`` bounds patches per page."""
    from transformers import ColQwen2Processor, Qwen2VLImageProcessorPil

    tokenizer = _char_tokenizer(_QWEN_SPECIALS, "[UNK]", pad_token="<|endoftext|>", eos_token="<|endoftext|>")
    images = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels)
    return ColQwen2Processor(image_processor=images, tokenizer=tokenizer)


def colqwen2_config(processor: Any, *, full_size: bool = False, embedding_dim: int = 128) -> Any:
    """ColQwen2 config: Qwen2-VL-2B dimensions when ``full_size``, else ~100k parameters."""
    from transformers import ColQwen2Config, Qwen2VLConfig

    tok = processor.tokenizer
    names = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>")
    ids = {name: tok.convert_tokens_to_ids(name) for name in names}
    if full_size:
        # Qwen2-VL-2B-Instruct, the backbone of vidore/colqwen2-v1.0.
        text = dict(
            vocab_size=151936,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0},
        )
        vision = dict(depth=32, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4)
    else:
        text = dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 10000.0},
            bos_token_id=None,
            eos_token_id=tok.eos_token_id,
        )
        vision = dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2)
    vision.update(in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    vlm = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
    )
    return ColQwen2Config(vlm_config=vlm, embedding_dim=embedding_dim)


def colpali_processor(*, image_size: int = 32) -> Any:
    """A ColPali processor with the character tokenizer; ``(image_size / patch) ** 2`` patches per page."""
    from transformers import ColPaliProcessor, SiglipImageProcessorPil

    named = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>"}
    tokenizer = _char_tokenizer(_PALI_SPECIALS, "<unk>", **named)
    # ColPaliProcessor reads the image token from the tokenizer; without it, it adds one the model lacks.
    tokenizer.image_token = "<image>"
    tokenizer.image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    patch = 14 if image_size % 14 == 0 else 8
    images = SiglipImageProcessorPil(
        size={"height": image_size, "width": image_size}, image_seq_length=(image_size // patch) ** 2
    )
    return ColPaliProcessor(image_processor=images, tokenizer=tokenizer)


def colpali_config(processor: Any, *, full_size: bool = False, embedding_dim: int = 128) -> Any:
    """ColPali config: PaliGemma-3B (448 px) dimensions when ``full_size``, else ~75k parameters."""
    from transformers import ColPaliConfig, PaliGemmaConfig

    if full_size:
        text = dict(
            model_type="gemma",
            vocab_size=257216,
            hidden_size=2048,
            intermediate_size=16384,
            num_hidden_layers=18,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=256,
        )
        vision = dict(
            model_type="siglip_vision_model",
            hidden_size=1152,
            intermediate_size=4304,
            num_hidden_layers=27,
            num_attention_heads=16,
            image_size=448,
            patch_size=14,
            projection_dim=2048,
        )
        hidden = 2048
    else:
        text = dict(
            model_type="gemma",
            vocab_size=len(processor.tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        )
        size = processor.image_processor.size["height"]
        vision = dict(
            model_type="siglip_vision_model",
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=size,
            patch_size=14 if size % 14 == 0 else 8,
            projection_dim=32,
        )
        hidden = 32
    vlm = PaliGemmaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=processor.image_token_id,
        projection_dim=hidden,
        hidden_size=hidden,
    )
    return ColPaliConfig(vlm_config=vlm, embedding_dim=embedding_dim)


def save_tiny_model(family: str, path: str | Path, *, embedding_dim: int = 16, seed: int = 0) -> Path:
    """Save a tiny random ``colqwen2`` or ``colpali`` model plus its processor into ``path``; returns it.

    Raises ``ValueError`` for an unknown family.
    """
    import torch
    from transformers import ColPaliForRetrieval, ColQwen2ForRetrieval

    torch.manual_seed(seed)
    target = Path(path)
    if family == "colqwen2":
        processor = colqwen2_processor()
        model: Any = ColQwen2ForRetrieval(colqwen2_config(processor, embedding_dim=embedding_dim))
    elif family == "colpali":
        processor = colpali_processor()
        model = ColPaliForRetrieval(colpali_config(processor, embedding_dim=embedding_dim))
    else:
        raise ValueError(f"unknown visual model family {family!r}; choose colqwen2 or colpali")
    model.save_pretrained(target)
    processor.save_pretrained(target)
    return target
