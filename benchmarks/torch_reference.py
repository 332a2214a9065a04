"""The same post-LN Transformer written with torch.nn: the eager reference we race against.

Benchmark-only: scratchformer itself never imports torch. The model matches
``scratchformer.engine.models.Transformer`` layer for layer (so both do the same arithmetic):

    memory = Encoder(dropout(E[src] * sqrt(D) + PE))      N post-LN layers
    h      = Decoder(dropout(E[tgt_in] * sqrt(D) + PE), memory)
    logits = h E^T                                        tied, unscaled
    loss   = label-smoothed cross-entropy, pad ignored, mean over non-pad targets

    layer:  x = LN(x + dropout(MHA(x)));  [decoder: x = LN(x + dropout(CrossMHA(x, m)))]
            x = LN(x + dropout(W_2 relu(x W_1 + b_1) + b_2))

Multi-head attention is ``nn.MultiheadAttention(bias=False, dropout=0.0)``, as the
paper's equations (no projection biases, no attention dropout; our config's defaults).
PyTorch fuses the self-attention Q/K/V projection into one ``in_proj`` GEMM and uses its
fused ``scaled_dot_product_attention`` kernel. Adam: ``torch.optim.Adam`` with the
paper's betas/eps and PyTorch's defaults otherwise (what an eager user runs).

``make_ddp_step`` runs the same step data-parallel: the model in
``DistributedDataParallel`` (the process group already set up, gloo on the CPU) with
PyTorch's defaults except ``broadcast_buffers=False`` (the one buffer is the constant
sinusoid table, which nobody needs to send every step). DDP averages the gradients over
the ranks during backward; with equal shares that is the gradient of the batch's mean.

One difference, on purpose and cost-neutral: PyTorch's ``label_smoothing`` spreads eps
over all V classes (eps/V), ours over the V-1 others (fairseq's eps/(V-1)).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def sinusoids(max_len: int, d: int) -> torch.Tensor:
    """The paper's interleaved table: (L, D)."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, two_i / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()


class EncoderLayer(nn.Module):
    def __init__(self, d, h, d_ff, p):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, h, dropout=0.0, bias=False, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.lin1, self.lin2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
        self.drop = nn.Dropout(p)

    def forward(self, x, pad):
        a = self.self_attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
        x = self.norm1(x + self.drop(a))
        return self.norm2(x + self.drop(self.lin2(F.relu(self.lin1(x)))))


class DecoderLayer(nn.Module):
    def __init__(self, d, h, d_ff, p):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, h, dropout=0.0, bias=False, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, h, dropout=0.0, bias=False, batch_first=True)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.lin1, self.lin2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
        self.drop = nn.Dropout(p)

    def forward(self, y, memory, causal, tgt_pad, src_pad):
        sa = self.self_attn
        a = sa(y, y, y, attn_mask=causal, key_padding_mask=tgt_pad, need_weights=False)[0]
        y = self.norm1(y + self.drop(a))
        c = self.cross_attn(y, memory, memory, key_padding_mask=src_pad, need_weights=False)[0]
        y = self.norm2(y + self.drop(c))
        return self.norm3(y + self.drop(self.lin2(F.relu(self.lin1(y)))))


class TorchTransformer(nn.Module):
    """Post-LN encoder-decoder with one shared embedding, as scratchformer's default."""

    def __init__(self, vocab, N, N_dec, d_model, d_ff, h, p_drop, max_len, pad_id=0):
        super().__init__()
        self.pad_id, self.scale = pad_id, math.sqrt(d_model)
        self.embed = nn.Embedding(vocab, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embed.weight, 0.0, d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[pad_id] = 0
        self.register_buffer("pe", sinusoids(max_len, d_model))
        self.drop = nn.Dropout(p_drop)
        self.enc = nn.ModuleList(EncoderLayer(d_model, h, d_ff, p_drop) for _ in range(N))
        self.dec = nn.ModuleList(DecoderLayer(d_model, h, d_ff, p_drop) for _ in range(N_dec))

    def forward(self, src, tgt_in):
        S, T = src.shape[1], tgt_in.shape[1]
        src_pad, tgt_pad = src == self.pad_id, tgt_in == self.pad_id  # True = ignore
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = not allowed
        x = self.drop(self.embed(src) * self.scale + self.pe[:S])
        for layer in self.enc:
            x = layer(x, src_pad)
        y = self.drop(self.embed(tgt_in) * self.scale + self.pe[:T])
        for layer in self.dec:
            y = layer(y, x, causal, tgt_pad, src_pad)
        return y @ self.embed.weight.T  # (B, T, V)

    def loss(self, src, tgt_in, tgt_out, eps_ls):
        logits = self(src, tgt_in)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt_out.reshape(-1),
            ignore_index=self.pad_id,
            label_smoothing=eps_ls,
        )


def build(cfg) -> tuple[TorchTransformer, torch.optim.Adam]:
    """A torch model and Adam for a ``TransformerConfig`` (post-LN, shared embeddings)."""
    dims = (cfg.vocab_size, cfg.N, cfg.N_dec, cfg.d_model, cfg.d_ff, cfg.h, cfg.P_drop)
    model = TorchTransformer(*dims, cfg.max_len, cfg.pad_id)
    model.train()
    return model, torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)


def make_step(model, opt, src, tgt_in, tgt_out, eps_ls):
    """A closure running one training step (zero_grad, forward, backward, Adam)."""
    src, tgt_in, tgt_out = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))

    def step() -> float:
        opt.zero_grad()
        loss = model.loss(src, tgt_in, tgt_out, eps_ls)
        loss.backward()
        opt.step()
        return float(loss)

    return step


class WithLoss(nn.Module):
    """``model.loss`` as a forward, so that DDP's hooks run around it (DDP reduces the
    gradients of what its own ``__call__`` computed)."""

    def __init__(self, model: TorchTransformer, eps_ls: float):
        super().__init__()
        self.model, self.eps_ls = model, eps_ls

    def forward(self, src, tgt_in, tgt_out):
        return self.model.loss(src, tgt_in, tgt_out, self.eps_ls)


def make_ddp_step(model, opt, src, tgt_in, tgt_out, eps_ls):
    """``make_step`` under ``DistributedDataParallel``: this rank's share of the batch,
    gradients averaged over the ranks of the (already initialised) process group."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(WithLoss(model, eps_ls), broadcast_buffers=False)
    src, tgt_in, tgt_out = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))

    def step() -> float:
        opt.zero_grad()
        loss = ddp(src, tgt_in, tgt_out)
        loss.backward()
        opt.step()
        return float(loss)

    return step
