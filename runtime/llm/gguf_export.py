"""A bitforge compressed checkpoint -> one GGUF file that llama.cpp (and its frontends) runs on an edge CPU.

Only layouts llama.cpp stores without re-quantizing are converted. A ``uniform-v1`` layer (codes ``0..2^b-1``,
float16 ``scale`` and ``zero`` per group, ``w = (code + zero) * scale``, :mod:`bitforge.runtime.formats.uniform`)
with ``group == 32`` maps onto one llama.cpp block of 32 per group, the block running along the input dimension
as bitforge's groups do:

* 4 bits, every ``zero == -8`` -> ``Q4_0`` (``w = d * (q - 8)``): ``d = scale``, ``q = code``. Bit-exact.
* 4 bits, any other zero -> ``Q4_1`` (``w = d * q + m``): ``d = scale``, ``q = code``, ``m = fp16(zero * scale)``
  rounded to nearest. ``d`` and ``q`` are exact; ``m`` is exact only when ``zero * scale`` is a float16 (an RTN
  zero is an integer in ``-15..0``, so ``m`` needs up to 15 significant bits and usually is not). The difference
  from bitforge's decoding is then at most half a float16 ulp of ``zero * scale`` (``<= 2^-11 |zero * scale|``,
  ``2^-25`` below float16's normal range), plus the float32 rounding of bitforge's own product when the zero is
  not an integer. It is reported per layer (blocks whose ``m`` rounds, largest weight change); ``exact=True``
  refuses such a layer instead. Why not refuse by default: the change is below a float16 ulp of the group's
  minimum, llama.cpp keeps ``m`` in float16 whatever the converter does, and refusing would leave no 4-bit
  asymmetric export at all.
* 8 bits, every ``zero == -128`` -> ``Q8_0`` (``w = d * q``, ``q`` int8): ``q = code - 128``. Bit-exact.

``--option symmetric=true`` (rtn, gptq: ``compress.uniform.symmetric_params``) makes the zero-points -8 / -128.

Everything else is refused with the reason, naming each layer: other bit widths (llama.cpp's 2/3/5/6-bit types are
the K-/IQ- super-block formats with quantized scales, not a float16 scale per 32), other groups or per-channel,
8 bits with another zero (Q8_0 has no offset), low-rank factors, binary and NVFP4 layouts. After encoding, every
layer is decoded again by ``gguf.quants.dequantize`` and compared with bitforge's decoder: Q4_0/Q8_0 bit for bit,
Q4_1 within the bound above, so a file this module writes is checked, not assumed.

Unchanged tensors (embeddings, norms, ``lm_head``, linears the checkpoint left alone): from a GGUF base (SmolLM2)
they are copied with the base file's own encoding, byte for byte (bitforge's model is their dequantization, so this
is exact and keeps SmolLM2's Q8_0 embedding at 8.5 bits); from a Hugging Face folder they go in as F32 (exact).
Metadata: from a GGUF base every key is copied (architecture, hyper-parameters, tokenizer, chat template) except
``general.file_type`` and the quantization version (written anew); from a folder the Llama keys are written from
``config.json`` and the tokenizer from a byte-level BPE ``tokenizer.json`` with GPT-2's pre-tokenizer (llama.cpp's
``gpt-2``; another pre-tokenizer is refused, since llama.cpp would split text differently). ``attn_q``/``attn_k``
get llama.cpp's per-head rotary permutation (the inverse of
:func:`bitforge.toolchain.compress.model_io.unpermute_rotary`); permuting rows moves each row's codes, scale and
zero together, so it changes no value. The file carries ``bitforge.export.*`` keys, which is how a later export
knows the file at ``-o`` is one it may replace.

Checked with llama.cpp itself (llama-cpp-python 0.3.36, not a dependency; the test that uses it is skipped where it
is not installed): the files load, tokenize as bitforge does and give its logits up to llama.cpp's 8-bit activations.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...runtime.formats import uniform as fmt
from ...toolchain.errors import BitforgeError, OutputError, VerificationFailed
from .modules import base_source  # the checkpoint's base model, as load_quantized finds it

BLOCK = 32
EXPORT_KEY = "bitforge.export.format"
EXPORT_FORMAT = "bitforge-gguf-export-v1"
INSTALL_HINT = "pip install 'bitforge[llm]' (transformers, gguf, accelerate)"

_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}
_IN_BLOCK = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
# Keys of a GGUF base that describe the old file, not the new one.
_DROP_KEYS = ("GGUF.", "general.file_type", "general.quantization_version", EXPORT_KEY.rsplit(".", 1)[0] + ".")


class GGUFExportError(BitforgeError):
    """The checkpoint (or its base model) holds something GGUF/llama.cpp cannot represent as this module promises."""


def _gguf():
    try:
        import gguf
    except ImportError:
        raise BitforgeError(f"GGUF export needs the gguf package: {INSTALL_HINT}") from None
    return gguf


def hf_to_gguf_name(name: str) -> str | None:
    """``LlamaForCausalLM`` parameter name -> llama.cpp tensor name (None: not a plain Llama parameter)."""
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".")
    if len(parts) >= 5 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and parts[-1] == "weight":
        inner = ".".join(parts[3:-1])
        if inner in _IN_BLOCK:
            return f"blk.{parts[2]}.{_IN_BLOCK[inner]}.weight"
    return None


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's per-head rotary permutation of q/k rows (``convert_hf_to_gguf.py``'s ``permute``): the rows of
    each head, ``[2, dim/2]`` (the two rotary halves), become ``[dim/2, 2]`` (interleaved pairs). Works on any
    per-row array (weights, packed codes, scales, zeros)."""
    if w.shape[0] % (2 * n_head):
        raise GGUFExportError(f"rotary permutation: {w.shape[0]} rows do not split into {n_head} heads of even size")
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- one quantized layer -> llama.cpp blocks ----------------------------------------------------------------

@dataclass
class LayerPlan:
    """How one checkpoint layer goes into the file: its ggml type, or why it cannot."""

    name: str
    gguf_name: str | None
    qtype: str | None = None
    reason: str | None = None


@dataclass
class LayerResult:
    name: str
    gguf_name: str
    qtype: str
    blocks: int
    inexact_m_blocks: int = 0      # Q4_1 blocks whose m = zero * scale is not a float16 and was rounded
    max_abs_change: float = 0.0    # largest |gguf dequantized - bitforge decoded| over the layer
    max_bound: float = 0.0         # the largest per-weight bound that change was checked against

    def to_json(self) -> dict:
        return dict(self.__dict__)


def plan_layer(name: str, meta: dict, tensors: dict[str, torch.Tensor]) -> LayerPlan:
    """Decide the ggml type of one layer from its manifest entry and stored tensors (zero-points are data: a
    symmetric layer is one whose every zero is exactly -8 or -128)."""
    gname = hf_to_gguf_name(f"{name}.weight")
    plan = LayerPlan(name, gname)
    what = f"method {meta.get('method')!r}, packing {meta.get('packing')!r}"
    if gname is None:
        plan.reason = "not a Llama decoder-block linear llama.cpp knows by name"
    elif meta.get("packing") != fmt.LAYOUT or set(tensors) != {"codes", "scale", "zero"}:
        extra = sorted(set(tensors) - {"codes", "scale", "zero"})
        plan.reason = (f"{what} stores {', '.join(sorted(tensors))}" + (f" (extra: {', '.join(extra)}: low-rank "
                       "factors or other terms llama.cpp has no place for)" if extra else "")
                       + f"; only plain {fmt.LAYOUT} layers (codes, scale, zero) convert")
    elif meta.get("group") != BLOCK:
        g = "per-channel (group none)" if meta.get("group") is None else f"group {meta.get('group')}"
        plan.reason = f"{what}: {g}; llama.cpp's Q4_0/Q4_1/Q8_0 blocks hold one scale per {BLOCK} weights"
    elif int(meta.get("bits", 0)) not in (4, 8):
        plan.reason = (f"{what}: {meta.get('bits')} bits; llama.cpp has a float16-scale-per-32 block only for 4 bits "
                       "(Q4_0, Q4_1) and 8 bits (Q8_0); its 2/3/5/6-bit types quantize the scales too")
    else:
        zero = tensors["zero"].to(torch.float32)
        if int(meta["bits"]) == 4:
            plan.qtype = "Q4_0" if bool((zero == -8).all()) else "Q4_1"
        elif bool((zero == -128).all()):
            plan.qtype = "Q8_0"
        else:
            bad = int((zero != -128).sum())
            plan.reason = (f"{what}: 8 bits with {bad} zero-point(s) other than -128; llama.cpp's Q8_0 "
                           "(w = d * q) has no offset. Quantize symmetrically to export (--option symmetric=true "
                           "with rtn or gptq)")
    return plan


def _check_tensors(name: str, meta: dict, t: dict[str, torch.Tensor]) -> tuple[int, int]:
    out, n_in = (int(x) for x in meta["shape"])
    bits, groups = int(meta["bits"]), n_in // BLOCK
    want = {"codes": ((out, fmt.row_bytes(n_in, bits)), torch.uint8), "scale": ((out, groups), torch.float16),
            "zero": ((out, groups), torch.float16)}
    for key, (shape, dtype) in want.items():
        if tuple(t[key].shape) != shape or t[key].dtype != dtype:
            raise GGUFExportError(f"layer {name}: stored {key} is {t[key].dtype} {tuple(t[key].shape)}, but the "
                                  f"manifest ({bits} bits, group {BLOCK}, shape [{out}, {n_in}]) needs {dtype} "
                                  f"{shape}; the checkpoint is damaged or was written by another tool")
    if n_in % BLOCK:
        raise GGUFExportError(f"layer {name}: {n_in} input columns are not a multiple of {BLOCK}")
    return out, n_in


def _nibbles(codes: np.ndarray) -> np.ndarray:
    """``[n, 32]`` 4-bit codes -> ``[n, 16]`` bytes in ggml's order: byte j = code j (low) | code j+16 (high)."""
    return (codes[:, :16] | (codes[:, 16:] << 4)).astype(np.uint8)


def unpacked_codes(name: str, meta: dict, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The layer's uint8 codes ``[out, in]`` (checked against the manifest first)."""
    out, n_in = _check_tensors(name, meta, tensors)
    return fmt.unpack_codes(tensors["codes"], int(meta["bits"]), (out, n_in))


def encode_layer(name: str, meta: dict, tensors: dict[str, torch.Tensor], qtype: str,
                 n_head: int | None = None, codes: torch.Tensor | None = None) -> tuple[np.ndarray, dict]:
    """The layer as ggml blocks: uint8 ``[out, in / 32 * type_size]`` (rows permuted for rotary when ``n_head``),
    and per-layer facts: ``m16``/``m_exact`` for Q4_1. ``codes``: :func:`unpacked_codes`, if already at hand."""
    out, n_in = _check_tensors(name, meta, tensors)
    codes = (unpacked_codes(name, meta, tensors) if codes is None else codes).numpy()
    scale = tensors["scale"].numpy()
    zero = tensors["zero"].numpy()
    if n_head:
        codes, scale, zero = (permute_rotary(a, n_head) for a in (codes, scale, zero))
    groups = n_in // BLOCK
    cb = codes.reshape(out * groups, BLOCK)
    d = scale.reshape(-1, 1).astype(np.float16)
    facts: dict = {}
    if qtype == "Q4_0":
        blocks = np.concatenate([d.view(np.uint8), _nibbles(cb)], axis=1)
    elif qtype == "Q4_1":
        m_exact = zero.astype(np.float64) * scale.astype(np.float64)        # exact: 11 x 11 significant bits
        with np.errstate(over="ignore"):
            m16 = m_exact.astype(np.float16)
        if not np.isfinite(m16).all():
            raise GGUFExportError(f"layer {name}: zero * scale overflows float16 (|m| > 65504), so Q4_1 cannot "
                                  "hold this layer's offset")
        facts = {"m16": m16, "m_exact": m_exact}
        blocks = np.concatenate([d.view(np.uint8), m16.reshape(-1, 1).view(np.uint8), _nibbles(cb)], axis=1)
    elif qtype == "Q8_0":
        q = (cb.astype(np.int16) - 128).astype(np.int8)
        blocks = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=1)
    else:
        raise ValueError(qtype)
    return np.ascontiguousarray(blocks.reshape(out, -1)), facts


def verify_layer(name: str, meta: dict, tensors: dict[str, torch.Tensor], qtype: str, blocks: np.ndarray,
                 facts: dict, n_head: int | None = None, codes: torch.Tensor | None = None) -> LayerResult:
    """Dequantize ``blocks`` with ``gguf.quants`` and compare with bitforge's decoding of the layer (rows permuted
    the same way): equal for Q4_0/Q8_0, within the float16 rounding of ``m`` for Q4_1 (module docstring)."""
    gguf = _gguf()
    from gguf.quants import dequantize

    t = getattr(gguf.GGMLQuantizationType, qtype)
    out, n_in = (int(x) for x in meta["shape"])
    got = dequantize(blocks, t).astype(np.float32).reshape(out, n_in)
    codes = unpacked_codes(name, meta, tensors) if codes is None else codes
    ref = fmt.dequantize(codes, tensors["scale"], tensors["zero"], BLOCK).numpy()
    if n_head:
        ref = permute_rotary(ref, n_head)
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    res = LayerResult(name, hf_to_gguf_name(f"{name}.weight"), qtype, out * n_in // BLOCK,
                      max_abs_change=float(diff.max()) if diff.size else 0.0)
    if qtype != "Q4_1":
        if res.max_abs_change != 0.0:
            raise VerificationFailed(f"layer {name}: {qtype} blocks decode to weights that differ from bitforge's "
                                     f"by up to {res.max_abs_change:.3g}; the block encoder is wrong")
        return res
    m16, m_exact = facts["m16"], facts["m_exact"]
    res.inexact_m_blocks = int((m16.astype(np.float64) != m_exact).sum())
    # Bound per weight: half a float16 ulp of zero*scale (2^-25 in the subnormal range) + half a float32 ulp of
    # bitforge's own float32 product (zero non-integer), + the same of gguf's float32 d*q + m.
    per_group = np.maximum(np.abs(m_exact) * 2.0 ** -11, 2.0 ** -25)
    bound = np.repeat(per_group.reshape(out, -1), BLOCK, axis=1) + np.abs(ref.astype(np.float64)) * 2.0 ** -23
    res.max_bound = float(bound.max()) if bound.size else 0.0
    if (diff > bound).any():
        raise VerificationFailed(f"layer {name}: Q4_1 blocks decode up to {float((diff - bound).max()):.3g} beyond "
                                 "the float16 rounding bound of m; the block encoder is wrong")
    return res


# -- the base model ------------------------------------------------------------------------------------------

@dataclass
class _Base:
    """What the writer needs from the base model: head counts, tied embeddings, the unchanged tensors (name ->
    (array, ggml type name or None for float32)), the metadata to write."""

    n_head: int
    n_head_kv: int
    tensors: dict[str, tuple[np.ndarray, str | None]]
    shapes: dict[str, tuple[int, ...]]            # llama.cpp name -> [out, in] as bitforge sees it
    write_meta: object = None                     # fn(writer)
    kind: str = ""
    float_type: str = "F32"


def _base_from_gguf(path: Path) -> _Base:
    gguf = _gguf()
    from ...toolchain.compress.model_io import llama_config_from_gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - any parse failure means a damaged file
        raise GGUFExportError(f"{path}: cannot read this GGUF file ({type(e).__name__}: {e})") from None
    cfg = llama_config_from_gguf(reader)
    if cfg is None:
        raise GGUFExportError(f"{path}: the base GGUF is not a plain Llama model (architecture "
                              f"{reader.fields['general.architecture'].contents()!r}, or rope scaling / experts); "
                              "GGUF export supports Llama-architecture bases")
    tensors = {t.name: (t.data, t.tensor_type.name) for t in reader.tensors}
    shapes = {t.name: tuple(int(x) for x in reversed(t.shape.tolist())) for t in reader.tensors}
    fields = [(k, f) for k, f in reader.fields.items() if not k.startswith(_DROP_KEYS)]

    def write_meta(w):
        for key, f in fields:
            if key == "general.architecture":
                continue
            vtype = f.types[0]
            sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, f.contents(), vtype, sub)

    return _Base(cfg.num_attention_heads, cfg.num_key_value_heads, tensors, shapes, write_meta, "gguf",
                 "the base file's own encoding")


def _hf_tokenizer_meta(folder: Path, n_vocab: int):
    """The GGUF tokenizer keys of a byte-level BPE ``tokenizer.json`` (what llama.cpp calls ``gpt2``)."""
    gguf = _gguf()
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise GGUFExportError(f"{folder}: no tokenizer.json; GGUF export from a Hugging Face folder needs a fast "
                              "(tokenizer.json) byte-level BPE tokenizer")
    tj = json.loads(path.read_text(encoding="utf-8"))
    model = tj.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback") or (tj.get("decoder") or {}).get("type") != "ByteLevel":
        raise GGUFExportError(f"{path}: a {model.get('type')} tokenizer (decoder "
                              f"{(tj.get('decoder') or {}).get('type')}); GGUF export from a folder supports "
                              "byte-level BPE tokenizers (llama.cpp's gpt2 model) only")
    pre = tj.get("pre_tokenizer") or {}
    if not (pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space")
            and not tj.get("normalizer")):
        raise GGUFExportError(f"{path}: pre-tokenizer {json.dumps(pre)[:200]} (normalizer {tj.get('normalizer')}); "
                              "GGUF export from a folder names only GPT-2's (ByteLevel with its regex, no prefix "
                              "space, no normalizer), which llama.cpp calls 'gpt-2'; llama.cpp would split the text "
                              "differently for any other. Export from a GGUF base instead, whose tokenizer is copied")
    vocab = dict(model["vocab"])
    special = set()
    for a in tj.get("added_tokens") or []:
        vocab.setdefault(a["content"], a["id"])
        if a.get("special"):
            special.add(a["id"])
    by_id = {i: tok for tok, i in vocab.items()}
    if sorted(by_id) != list(range(len(by_id))) or len(by_id) > n_vocab:
        raise GGUFExportError(f"{path}: token ids are not 0..{len(by_id) - 1} without gaps, or exceed the model's "
                              f"vocabulary of {n_vocab}")
    tokens = [by_id[i] for i in range(len(by_id))] + [f"[PAD{i}]" for i in range(len(by_id), n_vocab)]
    types = [int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(len(by_id))]
    types += [int(gguf.TokenType.UNUSED)] * (n_vocab - len(by_id))
    special_vocab = gguf.SpecialVocab(folder, load_merges=True, n_vocab=n_vocab)

    def write(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        special_vocab.add_to_gguf(w, quiet=True)
    return write


def _base_from_hf(folder: Path) -> _Base:
    from ...toolchain.compress.model_io import load_model

    lm = load_model(folder)
    cfg = lm.model.config
    if getattr(cfg, "model_type", None) != "llama":
        raise GGUFExportError(f"{folder}: model_type {getattr(cfg, 'model_type', None)!r}; GGUF export supports "
                              "Llama-architecture bases")
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default" or getattr(cfg, "rope_scaling", None) not in (None, {}) and \
            (cfg.rope_scaling or {}).get("rope_type", "default") != "default":
        raise GGUFExportError(f"{folder}: rope scaling {rope or cfg.rope_scaling}; GGUF export writes plain rotary "
                              "settings only")
    theta = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        raise GGUFExportError(f"{folder}: attention or MLP biases; llama.cpp's llama graph has none")
    tensors, shapes = {}, {}
    for name, p in lm.model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        g = hf_to_gguf_name(name)
        if g is None:
            raise GGUFExportError(f"{folder}: parameter {name} has no llama.cpp tensor name; not a plain Llama model")
        arr = p.detach().to(torch.float32).cpu().numpy()
        shapes[g] = tuple(arr.shape)
        tensors[g] = (arr, None)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    tok = _hf_tokenizer_meta(folder, cfg.vocab_size)

    def write_meta(w):
        w.add_name(folder.name)
        w.add_context_length(int(cfg.max_position_embeddings))
        w.add_embedding_length(int(cfg.hidden_size))
        w.add_block_count(int(cfg.num_hidden_layers))
        w.add_feed_forward_length(int(cfg.intermediate_size))
        w.add_head_count(int(cfg.num_attention_heads))
        w.add_head_count_kv(int(cfg.num_key_value_heads))
        w.add_rope_freq_base(theta)
        w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
        w.add_vocab_size(int(cfg.vocab_size))
        w.add_rope_dimension_count(int(head_dim))
        if head_dim != cfg.hidden_size // cfg.num_attention_heads:
            w.add_key_length(int(head_dim))
            w.add_value_length(int(head_dim))
        tok(w)

    return _Base(cfg.num_attention_heads, cfg.num_key_value_heads, tensors, shapes, write_meta, "hf", "F32")


def load_base(source) -> _Base:
    return _base_from_gguf(source.path) if source.kind == "gguf" else _base_from_hf(source.path)


# -- the whole export ---------------------------------------------------------------------------------------

@dataclass
class ExportReport:
    path: Path
    checkpoint: Path
    base: str
    layers: list[LayerResult]
    unchanged: dict[str, str]        # llama.cpp name -> ggml type of the tensors taken from the base
    bytes: int
    seconds: float

    @property
    def inexact_m_blocks(self) -> int:
        return sum(r.inexact_m_blocks for r in self.layers)

    def to_json(self) -> dict:
        return {"path": str(self.path), "checkpoint": str(self.checkpoint), "base": self.base, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "layers": [r.to_json() for r in self.layers],
                "unchanged": self.unchanged}


def plan_export(manifest: dict, tensors: dict[str, dict[str, torch.Tensor]]) -> list[LayerPlan]:
    """Every layer's plan; raises :class:`GGUFExportError` listing every refused layer and its reason."""
    plans = [plan_layer(n, m, tensors[n]) for n, m in manifest["layers"].items()]
    refused = [p for p in plans if p.reason]
    if refused:
        shown = "\n".join(f"  {p.name}: {p.reason}" for p in refused[:12])
        more = f"\n  ... and {len(refused) - 12} more" if len(refused) > 12 else ""
        raise GGUFExportError(f"{len(refused)} of {len(plans)} layers cannot be written to GGUF exactly:\n{shown}"
                              f"{more}\nGGUF export takes uniform-v1 layers with group {BLOCK}: 4 bits (Q4_0/Q4_1) "
                              "or symmetric 8 bits (Q8_0), e.g. bitforge quantize MODEL --method rtn --bits 4 "
                              f"--group {BLOCK} (add --option symmetric=true for Q4_0, and for 8 bits)")
    return plans


def check_export_output(out: Path, force: bool = False, inputs=()) -> Path:
    """Refuse ``-o`` when it is a folder, an input, or an existing file bitforge did not export (no
    ``bitforge.export.format`` key) unless ``force``. Returns the real path."""
    from ...toolchain.outputs import check_file

    real = check_file(out, inputs=inputs)
    if real.exists() and not force and not is_bitforge_export(real):
        raise OutputError(f"-o {out}: exists and was not written by bitforge export; pass --force to replace it")
    return real


def is_bitforge_export(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                return False
        reader = _gguf().GGUFReader(str(path))
    except Exception:  # noqa: BLE001 - unreadable: not ours
        return False
    f = reader.fields.get(EXPORT_KEY)
    return f is not None and f.contents() == EXPORT_FORMAT


def _file_type(gguf, layers: list[LayerResult]) -> int:
    by = {}
    for r in layers:
        by[r.qtype] = by.get(r.qtype, 0) + r.blocks
    main = max(by, key=by.get) if by else "F32"
    return int({"Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
                "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}.get(main, gguf.LlamaFileType.ALL_F32))


def export_gguf(checkpoint: Path | str, out: Path | str, force: bool = False, exact: bool = False,
                log=None) -> ExportReport:
    """Write ``checkpoint`` (a folder written by ``bitforge quantize``) as the GGUF file ``out``.

    ``exact``: refuse Q4_1 layers whose ``m = zero * scale`` had to be rounded to float16 (default: write them and
    report the rounding). The file is written beside ``out`` under a temporary name and renamed into place."""
    from ...toolchain.compress.checkpoint import WEIGHTS, load_checkpoint

    gguf = _gguf()
    t0 = time.perf_counter()
    checkpoint, out = Path(checkpoint), Path(out)
    ckpt = load_checkpoint(checkpoint)
    plans = plan_export(ckpt.manifest, ckpt.tensors)
    source = base_source(ckpt.manifest, checkpoint)
    real = check_export_output(out, force, inputs=[checkpoint / WEIGHTS, source.path])
    if log:
        log(f"base model {source.describe()}")
    base = load_base(source)

    quantized, results = {}, []
    for p in plans:
        meta, t = ckpt.manifest["layers"][p.name], ckpt.tensors[p.name]
        if p.gguf_name not in base.shapes:
            raise GGUFExportError(f"layer {p.name}: the base model has no tensor {p.gguf_name}; was the checkpoint "
                                  "made from another model?")
        if tuple(base.shapes[p.gguf_name]) != tuple(int(x) for x in meta["shape"]):
            raise GGUFExportError(f"layer {p.name}: shape {meta['shape']} in the manifest, "
                                  f"{list(base.shapes[p.gguf_name])} in the base model")
        heads = base.n_head if ".attn_q." in p.gguf_name else base.n_head_kv if ".attn_k." in p.gguf_name else None
        codes = unpacked_codes(p.name, meta, t)
        blocks, facts = encode_layer(p.name, meta, t, p.qtype, heads, codes)
        res = verify_layer(p.name, meta, t, p.qtype, blocks, facts, heads, codes)
        if exact and res.inexact_m_blocks:
            raise GGUFExportError(f"layer {p.name}: {res.inexact_m_blocks} of {res.blocks} Q4_1 blocks have an "
                                  "offset m = zero * scale that float16 cannot hold exactly (largest weight change "
                                  f"{res.max_abs_change:.3g}); drop --exact to write them with m rounded to nearest")
        quantized[p.gguf_name] = (blocks, p.qtype)
        results.append(res)

    unchanged = {n: (ty or "F32") for n, (_, ty) in base.tensors.items() if n not in quantized}
    w = None
    tmp = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{real.name}.tmp-{os.getpid()}-", dir=real.parent)
        os.close(fd)
        tmp = Path(name)
        w = gguf.GGUFWriter(str(tmp), "llama")
        base.write_meta(w)
        w.add_file_type(_file_type(gguf, results))
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        w.add_string(EXPORT_KEY, EXPORT_FORMAT)
        w.add_string("bitforge.export.checkpoint", checkpoint.name)
        w.add_string("bitforge.export.method", str(ckpt.manifest.get("config", {}).get("method")))
        for n, (arr, ty) in base.tensors.items():
            if n in quantized:
                blocks, qt = quantized[n]
                w.add_tensor(n, blocks, raw_dtype=getattr(gguf.GGMLQuantizationType, qt))
            elif ty is None:
                w.add_tensor(n, np.ascontiguousarray(arr, dtype=np.float32))
            else:
                w.add_tensor(n, arr, raw_dtype=getattr(gguf.GGMLQuantizationType, ty))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        w = None
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, real)
        tmp = None
    finally:
        if w is not None:
            w.close()
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return ExportReport(real, checkpoint, source.describe(), results, unchanged, real.stat().st_size,
                        time.perf_counter() - t0)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
