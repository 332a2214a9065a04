"""Small Marian (OPUS-MT-layout) folders built here, never downloaded: two SentencePiece
models trained on a varied text (one per side), their shared ``vocab.json`` (``</s>`` 0,
``<unk>`` 1, the pieces, ``<pad>`` last, as OPUS-MT's), and a random ``MarianMTModel``
built by transformers (SiLU, 2 + 2 layers, biases and ``final_logits_bias`` non-zero)
saved with ``save_pretrained``.

Dimension key: ``V`` vocabulary, ``D`` d_model.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from gpt2_folders import need, varied_line

#: pieces of the target model left out of vocab.json: read as <unk> (OPUS-MT's
#: vocabularies lack some pieces too)
DROPPED_EVERY = 9


def varied_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Source and target lines of the varied text (several scripts, digits, punctuation,
    runs of whitespace), the target another line of it."""
    r = random.Random(seed)
    return [(varied_line(r).replace("<|endoftext|>", "</s>"), varied_line(r)) for _ in range(n)]


def train_spm(texts: list[str], vocab_size: int, seed_text: str) -> bytes:
    """A SentencePiece unigram model as OPUS-MT's: ``</s>`` 0, ``<unk>`` 1, no <s> or
    padding, a character coverage below 1 (rare characters are <unk>)."""
    spm = need("sentencepiece")
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=out, model_type="unigram",
        vocab_size=vocab_size, character_coverage=0.995, bos_id=-1, pad_id=-1, eos_id=0,
        unk_id=1, input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
        minloglevel=2, seed_sentencepiece_size=100000,
    )
    return out.getvalue()


def write_tokenizer(folder: Path, seed: int = 0, vocab_size: int = 400) -> int:
    """source.spm, target.spm and vocab.json in ``folder``; returns V (vocab.json's size)."""
    spm = need("sentencepiece")
    pairs = varied_pairs(3000, seed)
    folder.mkdir(parents=True, exist_ok=True)
    models = {}
    for side, texts in (("source", [s for s, _ in pairs]), ("target", [t for _, t in pairs])):
        models[side] = spm.SentencePieceProcessor(
            model_proto=train_spm(texts, vocab_size, side))
        (folder / f"{side}.spm").write_bytes(models[side].serialized_model_proto())
    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for side in ("source", "target"):
        sp = models[side]
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            dropped = side == "target" and i % DROPPED_EVERY == 0
            if p not in seen and not sp.is_control(i) and not sp.is_unknown(i) and not dropped:
                pieces.append(p)
                seen.add(p)
    pieces.append("<pad>")
    (folder / "vocab.json").write_text(
        json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False, indent=1),
        encoding="utf-8")
    return len(pieces)


def marian_config(V: int, **overrides) -> dict:
    """A small Marian (2 + 2 layers, 2 heads, D = 32), OPUS-MT's ids and options."""
    c = dict(vocab_size=V, decoder_vocab_size=V, d_model=32, encoder_layers=2,
             decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1,
             forced_eos_token_id=0, activation_function="swish", scale_embedding=True,
             share_encoder_decoder_embeddings=True, dropout=0.1, attention_dropout=0.0,
             activation_dropout=0.0)
    return {**c, **overrides}


def transformers_marian(folder: Path, seed: int = 0, **overrides):
    """A random MarianMTModel with a tokenizer, saved with save_pretrained: every bias
    and LayerNorm made non-zero, ``final_logits_bias`` non-zero, the weights drawn at
    1/sqrt(fan-in) (the queries' and keys' twice that: attention that is not near
    uniform; transformers' own 0.02 gives outputs that hardly depend on the source),
    <pad>'s row zero. Returns the torch model (float32, eval mode)."""
    torch = need("torch")
    transformers = need("transformers")
    V = write_tokenizer(folder, seed)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(V, **overrides)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif p.ndim == 2 and "embed_positions" not in name:  # (out, in), or (V, D)
                p.normal_(0.0, p.shape[1] ** -0.5)
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(2.0)
        model.model.shared.weight[model.config.pad_token_id] = 0.0  # <pad>, the start
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(str(folder))
    return model.eval()
