"""The model configuration, with the paper's names, and named presets.

``tiny`` is for tests, ``small`` trains on a CPU, ``base`` and ``big`` are the paper's
Table 3 rows; ``base-A1`` ... ``base-E`` are the Table 3 ablations of the base model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from scratchformer.engine.errors import ConfigError, ScratchformerError, need, wrong_field_types
from scratchformer.engine.nn.attention import ATTENTION_VARIANTS


@dataclass
class TransformerConfig:
    vocab_size: int  # V, the shared source/target vocabulary
    N: int = 6  # encoder layers
    N_dec: int | None = None  # decoder layers (None: N; set to N when the config is made)
    d_model: int = 512  # D, width of every residual stream
    d_ff: int = 2048  # F, inner width of the position-wise feed-forward network
    h: int = 8  # H, attention heads
    d_k: int | None = None  # Dh, query/key width per head (default: d_model / h)
    d_v: int | None = None  # Dv, value width per head (default: d_model / h)
    P_drop: float = 0.1  # dropout on sub-layer outputs and on embeddings + positions
    P_drop_attn: float = 0.0  # dropout on attention weights (the paper: none)
    P_drop_ffn: float = 0.0  # dropout after the FFN activation (the paper: none)
    eps_ls: float = 0.1  # label smoothing
    positions: str = "sinusoidal"  # "sinusoidal" (the paper) or "learned" (Table 3 row E)
    max_len: int = 1024  # longest sequence the position table covers
    norm: str = "post"  # "post" (the paper: LN(x + sublayer)) or "pre" (x + sublayer(LN))
    share_embeddings: str = "all"  # "all": src = tgt = output; "decoder": tgt = output; "none"
    activation: str = "relu"  # "relu" (the paper), "gelu" (tanh form) or "silu" (Marian's swish)
    ln_eps: float = 1e-5  # LayerNorm epsilon
    # padding token id: masked in attention, ignored by the loss. A decoder-only model
    # may set it to vocab_size: padding is then no token of the vocabulary (GPT-2 has
    # none), never looked up, predicted or drawn
    pad_id: int = 0
    # beginning of sentence: the first decoder input. An encoder-decoder may start from
    # its padding token (bos_id = pad_id with zero_start: Marian's start, the zero row
    # of <pad>): position 0 is then attended although its id is the padding's
    bos_id: int = 1
    eos_id: int = 2  # end of sentence: the last decoder output
    src_vocab_size: int | None = None  # only when share_embeddings != "all"
    seed: int = 0  # initialisation seed
    # Self-attention variant, a name of nn.attention.ATTENTION_VARIANTS: "dense" (the
    # paper), "relative" (Shaw et al.: key and value embeddings of distances clipped to
    # +-max_relative_position), "relative_skew" (Music Transformer: per-head key
    # embeddings, the skew trick; causal only), "local" (Image Transformer 1-D: blocks of
    # local_block see their own and the previous block; causal only). Causal-only variants
    # apply to causal self-attention (decoder, language model); an encoder then needs an
    # encoder_attention that is not causal only ("dense" or "relative").
    attention: str = "dense"
    encoder_attention: str | None = None  # None: the same as attention
    max_relative_position: int = 16  # k: relative distances are clipped to +-k
    local_block: int = 64  # block size of local attention
    # query block size for memory-efficient attention (None: dense)
    attention_block: int | None = None
    # biases b_q b_k b_v b_o on the attention projections (the paper has none; GPT-2
    # and Marian have them)
    attention_bias: bool = False
    # multiply the token embeddings by sqrt(d_model) (the paper, Marian; GPT-2: False)
    scale_embedding: bool = True
    # the decoder's first position reads the zero vector, not its token's embedding
    # (Marian's start, which CTranslate2's converter assumes); encoder-decoder only
    zero_start: bool = False
    # a bias b (V,) added to the output logits, h E^T + b (Marian's final_logits_bias);
    # encoder-decoder only
    output_bias: bool = False
    # an id appended to every source sentence (Marian's </s>; None: nothing appended):
    # the data, translate and plots add it, the model reads it as any token
    source_end_id: int | None = None
    extra: dict = field(default_factory=dict)  # free-form notes kept with checkpoints

    def __post_init__(self):
        if self.N_dec is None and isinstance(self.N, int):  # a bad N is reported as itself
            self.N_dec = self.N
        self.validate()

    @property
    def src_vocab(self) -> int:
        return self.src_vocab_size or self.vocab_size

    @property
    def pad_outside(self) -> bool:
        """Padding is no token of the vocabulary: ``pad_id == vocab_size`` (one
        vocabulary: no separate ``src_vocab_size``)."""
        return self.pad_id == self.vocab_size and self.src_vocab_size is None

    @property
    def embedding_scale(self) -> float:
        """What the token embeddings are multiplied by: sqrt(d_model), or 1."""
        return math.sqrt(self.d_model) if self.scale_embedding else 1.0

    def validate(self) -> None:
        """Raise ConfigError (a ValueError) naming the first field that is wrong."""
        try:
            self._check()
        except ConfigError as e:
            raise ConfigError(f"invalid TransformerConfig: {e}") from None

    def _check(self) -> None:
        wrong = wrong_field_types(type(self), vars(self))
        need(not wrong, "; ".join(wrong))
        need(self.vocab_size >= 2, f"vocab_size must be >= 2, got {self.vocab_size}")
        need(
            self.N >= 0 and self.N_dec >= 1,
            f"need N >= 0 and N_dec >= 1, got {self.N}, {self.N_dec}",
        )
        need(
            self.d_model > 0 and self.d_ff > 0 and self.h > 0,
            "d_model, d_ff and h must be positive",
        )
        need(
            self.d_k is not None or self.d_model % self.h == 0,
            f"d_model={self.d_model} not divisible by h={self.h}: give d_k and d_v",
        )
        for name in ("P_drop", "P_drop_attn", "P_drop_ffn"):
            p = getattr(self, name)
            need(0.0 <= p < 1.0, f"{name} must be in [0, 1), got {p}")
        need(0.0 <= self.eps_ls < 1.0, f"eps_ls must be in [0, 1), got {self.eps_ls}")
        need(self.positions in ("sinusoidal", "learned"), f"positions={self.positions!r}")
        need(self.norm in ("post", "pre"), f"norm={self.norm!r}: expected 'post' or 'pre'")
        need(
            self.share_embeddings in ("all", "decoder", "none"),
            f"share_embeddings={self.share_embeddings!r}: expected 'all', 'decoder' or 'none'",
        )
        need(
            self.src_vocab_size is None or self.share_embeddings != "all",
            "a separate src_vocab_size needs share_embeddings 'decoder' or 'none'",
        )
        need(
            self.activation in ("relu", "gelu", "silu"),
            f"activation={self.activation!r}: expected 'relu', 'gelu' or 'silu'",
        )
        for name in ("d_k", "d_v"):
            v = getattr(self, name)
            need(v is None or v > 0, f"{name} must be positive (or None for d_model / h), got {v}")
        need(
            self.src_vocab_size is None or self.src_vocab_size >= 2,
            f"src_vocab_size must be >= 2, got {self.src_vocab_size}",
        )
        for name in ("pad_id", "bos_id", "eos_id"):
            i = getattr(self, name)
            if name == "pad_id" and self.pad_outside:
                continue  # padding that is no token of the vocabulary (see the field)
            need(
                0 <= i < min(self.vocab_size, self.src_vocab),
                f"{name}={i} is outside the vocabulary of {min(self.vocab_size, self.src_vocab)}",
            )
        need(
            self.source_end_id is None or 0 <= self.source_end_id < self.src_vocab,
            f"source_end_id={self.source_end_id} is outside the source vocabulary of "
            f"{self.src_vocab}",
        )
        need(
            self.bos_id != self.pad_id or self.zero_start,
            f"bos_id = pad_id = {self.pad_id} (the decoder starts from the padding token, "
            "Marian's start) needs zero_start = true: the padding row gets no gradient, so "
            "the start must read the zero vector",
        )
        need(self.max_len >= 1, f"max_len must be >= 1, got {self.max_len}")
        need(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        kinds = sorted(ATTENTION_VARIANTS)
        need(
            self.attention in ATTENTION_VARIANTS,
            f"attention={self.attention!r}: expected one of {kinds}",
        )
        for_encoder = [k for k in kinds if not ATTENTION_VARIANTS[k].causal_only]
        need(
            self.encoder_attention is None or self.encoder_attention in for_encoder,
            f"encoder_attention={self.encoder_attention!r}: expected None or one of "
            f"{for_encoder} (the others are causal only)",
        )
        need(
            self.max_relative_position >= 1,
            f"max_relative_position must be >= 1, got {self.max_relative_position}",
        )
        need(self.local_block >= 1, f"local_block must be >= 1, got {self.local_block}")
        need(
            self.attention_block is None or self.attention_block >= 1,
            f"attention_block must be None or >= 1, got {self.attention_block}",
        )

    # -- presets and (de)serialisation -------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides) -> TransformerConfig:
        """``TransformerConfig.preset("base", vocab_size=37000, norm="pre")``."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: expected one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}")
        return cls(**d)


_BASE = dict(N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1)

PRESETS: dict[str, dict] = {
    # tests: h > 1, d_k = 8 differs from the test lengths, S != T in every test batch
    "tiny": dict(N=2, d_model=16, d_ff=32, h=2, P_drop=0.1, eps_ls=0.1, max_len=64),
    # a CPU-sized model (the Bible config of the real-data issue)
    "small": dict(N=3, d_model=256, d_ff=1024, h=4, P_drop=0.1, eps_ls=0.1),
    "base": dict(_BASE),
    "big": dict(N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, eps_ls=0.1),
    # Table 3 ablations of the base model
    "base-A1": dict(_BASE, h=1, d_k=512, d_v=512),
    "base-A2": dict(_BASE, h=4, d_k=128, d_v=128),
    "base-A3": dict(_BASE, h=16, d_k=32, d_v=32),
    "base-A4": dict(_BASE, h=32, d_k=16, d_v=16),
    "base-B1": dict(_BASE, d_k=16),
    "base-B2": dict(_BASE, d_k=32),
    "base-C1": dict(_BASE, N=2),
    "base-C2": dict(_BASE, N=4),
    "base-C3": dict(_BASE, N=8),
    "base-C4": dict(_BASE, d_model=256, d_k=32, d_v=32),
    "base-C5": dict(_BASE, d_model=1024, d_k=128, d_v=128),
    "base-C6": dict(_BASE, d_ff=1024),
    "base-C7": dict(_BASE, d_ff=4096),
    "base-D1": dict(_BASE, P_drop=0.0),
    "base-D2": dict(_BASE, P_drop=0.2),
    "base-D3": dict(_BASE, eps_ls=0.0),
    "base-D4": dict(_BASE, eps_ls=0.2),
    "base-E": dict(_BASE, positions="learned"),
}


# -- the models' entry checks (the Python API's, as the command line's) ----------------------
class CacheError(ScratchformerError):
    """A backward pass was given a cache its model did not make."""


def check_config(config, who: str) -> None:
    """Refuse, in one line, a ``config`` that is not a TransformerConfig (None, a dict:
    the model would fail on its first field), and a backend named by
    ``SCRATCHFORMER_BACKEND`` that could not start (the command line refuses it too: a
    model built on NumPy instead would be a silent surprise)."""
    from scratchformer.engine import backend  # noqa: PLC0415  (floor 0: imported where needed)

    backend.require_env_backend()
    if isinstance(config, TransformerConfig):
        if config.pad_outside and who != "LanguageModel":
            raise ConfigError(
                f"{who}(config): pad_id = vocab_size (padding that is no token of the "
                "vocabulary) is for the decoder-only LanguageModel: give a pad_id below "
                f"{config.vocab_size}"
            )
        if config.zero_start and who != "Transformer":
            raise ConfigError(
                f"{who}(config): zero_start (the decoder starts from the zero vector) is "
                "for the encoder-decoder Transformer"
            )
        for name, what, on in (
            ("output_bias", "a bias on the output logits", config.output_bias),
            ("source_end_id", "an id appended to every source", config.source_end_id is not None),
        ):
            if on and who != "Transformer":
                raise ConfigError(
                    f"{who}(config): {name} ({what}) is for the encoder-decoder Transformer"
                )
        return
    how = "TransformerConfig(**d)" if isinstance(config, dict) else "TransformerConfig(...)"
    raise ConfigError(
        f"{who}(config): config must be a TransformerConfig, got {type(config).__name__} "
        f"(make one: {how}, or TransformerConfig.preset(name, vocab_size=V))"
    )


def check_cache(model, cache, kind: type, who: str) -> None:
    """Refuse, in one line, a ``cache`` that is not a ``kind`` made by ``model``'s own
    forward (another model's, even of the same sizes, would put its gradients on the
    wrong parameters, or fail deep in an op on a shape)."""
    if not isinstance(cache, kind):
        raise CacheError(
            f"{who}.backward: expected the {kind.__name__} its forward returned, got "
            f"{type(cache).__name__}"
        )
    owner = getattr(cache, "owner", 0)  # 0: made by hand (a test), not told
    if owner and owner != id(model):
        raise CacheError(
            f"{who}.backward: this cache was made by another model's forward: a cache goes "
            "back to the model that made it"
        )
