"""A llama-architecture transformer in torch, laid out so that its weights map 1:1 onto the GGUF
llama tensors (see export_gguf.py for the names).

    x = token_embd[tokens]
    for each layer:
        h = x + attn_output(attention(rope(attn_q(norm(x))), rope(attn_k(norm(x))), attn_v(norm(x))))
        x = h + ffn_down(silu(ffn_gate(norm(h))) * ffn_up(norm(h)))
    logits = output(norm(x))

norm is RMSNorm with a learned weight; attention is causal, grouped-query (query head h reads
key/value head h // (n_head / n_head_kv)); rope is the "normal" (GPT-J / Meta) layout that rotates
adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i / head_dim). No biases anywhere.
"""
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 2048
    dim: int = 256
    n_layer: int = 4
    n_head: int = 8
    n_head_kv: int = 4
    ffn_dim: int = 704
    context: int = 128
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.dim // self.n_head

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, n_pos, base):
    """cos and sin of pos * base^(-2i/head_dim), shape [n_pos, head_dim/2]."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def apply_rope(x, cos, sin):
    """x: [batch, seq, heads, head_dim]; rotates each adjacent pair (x[2i], x[2i+1])."""
    b, t, h, d = x.shape
    pairs = x.view(b, t, h, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos[:t, None, :], sin[:t, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).view(b, t, h, d)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn_q = nn.Linear(cfg.dim, cfg.n_head * hd, bias=False)
        self.attn_k = nn.Linear(cfg.dim, cfg.n_head_kv * hd, bias=False)
        self.attn_v = nn.Linear(cfg.dim, cfg.n_head_kv * hd, bias=False)
        self.attn_output = nn.Linear(cfg.n_head * hd, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.ffn_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.ffn_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        b, t, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = apply_rope(self.attn_q(h).view(b, t, cfg.n_head, hd), cos, sin)
        k = apply_rope(self.attn_k(h).view(b, t, cfg.n_head_kv, hd), cos, sin)
        v = self.attn_v(h).view(b, t, cfg.n_head_kv, hd)
        group = cfg.n_head // cfg.n_head_kv
        k = k.repeat_interleave(group, dim=2)  # query head j uses kv head j // group
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [b, heads, t, hd]
        att = (q @ k.transpose(-2, -1)) * (hd ** -0.5) + mask[:t, :t]
        out = F.softmax(att, dim=-1) @ v
        x = x + self.attn_output(out.transpose(1, 2).reshape(b, t, cfg.n_head * hd))
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.context, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.full((cfg.context, cfg.context), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        self.apply(self._init)
        # Residual projections start smaller so that the residual stream grows slowly with depth.
        for blk in self.blocks:
            for w in (blk.attn_output.weight, blk.ffn_down.weight):
                nn.init.normal_(w, std=0.02 / (2 * cfg.n_layer) ** 0.5)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens):
        x = self.token_embd(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        return self.output(self.output_norm(x))
