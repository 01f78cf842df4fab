"""Writes a training checkpoint and its vocabulary as a standard GGUF v3 llama file.

Tensor names and keys are the usual llama ones. A torch Linear weight [out, in] is written with
GGUF dims [in, out] (ne[0] = in) and the same row-major bytes. Norm weights are f32; matrices f16.
The model was trained with the normal (adjacent-pair) rotary layout that GGUF llama runtimes
apply, so Q and K are written as they are, without the permutation HF conversions need.
load_model reads such a file back into the torch model (train_draft.py's teacher).

The vocabulary decides the tokenizer keys: a SentencePiece-style vocab.json from tokenizer.py
(kjv-tiny: tokenizer.ggml.model "llama") or a byte-level BPE bpe_vocab.json from bpe_tokenizer.py
(kjv-bpe: "gpt2" with pre "llama-bpe", merges, the Llama 3 special tokens and chat template).
"""
import argparse
import json
import os

import numpy as np
import torch

import bpe_tokenizer
import gguf
import tokenizer
from model import Config, Llama


def export(ckpt_path, vocab_path, out_path, name):
    ckpt = torch.load(ckpt_path, map_location="cpu")
    cfg = Config(**ckpt["config"])
    sd = {k: v.float().numpy() for k, v in ckpt["model"].items()}
    with open(vocab_path, encoding="utf-8") as f:
        is_bpe = "merges" in json.load(f)
    vocab = (bpe_tokenizer.Vocab if is_bpe else tokenizer.Vocab).load(vocab_path)
    if len(vocab) != cfg.vocab_size:
        raise ValueError(f"vocab has {len(vocab)} tokens, model {cfg.vocab_size}")

    w = gguf.Writer(alignment=32)
    w.add("general.architecture", gguf.STRING, "llama")
    w.add("general.name", gguf.STRING, name)
    w.add("general.alignment", gguf.UINT32, 32)
    w.add("llama.context_length", gguf.UINT32, cfg.context)
    w.add("llama.embedding_length", gguf.UINT32, cfg.dim)
    w.add("llama.block_count", gguf.UINT32, cfg.n_layer)
    w.add("llama.feed_forward_length", gguf.UINT32, cfg.ffn_dim)
    w.add("llama.rope.dimension_count", gguf.UINT32, cfg.head_dim)
    w.add("llama.rope.freq_base", gguf.FLOAT32, cfg.rope_base)
    w.add("llama.attention.head_count", gguf.UINT32, cfg.n_head)
    w.add("llama.attention.head_count_kv", gguf.UINT32, cfg.n_head_kv)
    w.add("llama.attention.layer_norm_rms_epsilon", gguf.FLOAT32, cfg.norm_eps)
    w.add("llama.vocab_size", gguf.UINT32, cfg.vocab_size)
    if is_bpe:
        add_bpe_vocab(w, vocab)
    else:
        add_spm_vocab(w, vocab)

    for gguf_name, torch_name in tensor_names(cfg):
        array = sd[torch_name]
        w.add_tensor(gguf_name, array, gguf.GGML_F16 if array.ndim == 2 else gguf.GGML_F32)
    w.write(out_path)
    return ckpt["step"], os.path.getsize(out_path)


def tensor_names(cfg):
    """(GGUF name, torch state_dict name) of every weight, in file order."""
    # token_embd is [vocab, dim] in torch, so GGUF [dim, vocab]: one row of dim values per token.
    names = [("token_embd.weight", "token_embd.weight")]
    for i in range(cfg.n_layer):
        for t in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                  "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
            names.append((f"blk.{i}.{t}.weight", f"blocks.{i}.{t}.weight"))
    return names + [("output_norm.weight", "output_norm.weight"), ("output.weight", "output.weight")]


def load_model(path):
    """The inverse of export: the torch Llama (float32, eval mode) of a GGUF llama file, and the
    file's key-values. gguf.Reader gives each tensor back in the torch layout ([out, in])."""
    r = gguf.Reader(path)
    kv = r.kv
    cfg = Config(vocab_size=kv["llama.vocab_size"], dim=kv["llama.embedding_length"],
                 n_layer=kv["llama.block_count"], n_head=kv["llama.attention.head_count"],
                 n_head_kv=kv["llama.attention.head_count_kv"],
                 ffn_dim=kv["llama.feed_forward_length"], context=kv["llama.context_length"],
                 rope_base=kv["llama.rope.freq_base"],
                 norm_eps=kv["llama.attention.layer_norm_rms_epsilon"])
    model = Llama(cfg)
    model.load_state_dict({t: torch.from_numpy(r.tensors[g].astype(np.float32))
                           for g, t in tensor_names(cfg)})
    return model.eval(), kv


def add_spm_vocab(w, vocab):
    w.add("tokenizer.ggml.model", gguf.STRING, "llama")
    w.add_array("tokenizer.ggml.tokens", gguf.STRING, vocab.tokens)
    w.add_array("tokenizer.ggml.scores", gguf.FLOAT32, vocab.scores)
    w.add_array("tokenizer.ggml.token_type", gguf.INT32, vocab.types)
    w.add("tokenizer.ggml.bos_token_id", gguf.UINT32, tokenizer.BOS)
    w.add("tokenizer.ggml.eos_token_id", gguf.UINT32, tokenizer.EOS)
    w.add("tokenizer.ggml.unknown_token_id", gguf.UINT32, tokenizer.UNK)
    w.add("tokenizer.ggml.add_bos_token", gguf.BOOL, True)
    w.add("tokenizer.ggml.add_space_prefix", gguf.BOOL, True)


def add_bpe_vocab(w, vocab):
    vocab.check()
    w.add("tokenizer.ggml.model", gguf.STRING, "gpt2")
    w.add("tokenizer.ggml.pre", gguf.STRING, bpe_tokenizer.PRE_NAME)
    w.add_array("tokenizer.ggml.tokens", gguf.STRING, vocab.tokens)
    w.add_array("tokenizer.ggml.token_type", gguf.INT32, vocab.types)
    w.add_array("tokenizer.ggml.merges", gguf.STRING, vocab.merge_strings())
    w.add("tokenizer.ggml.bos_token_id", gguf.UINT32, vocab.bos)
    w.add("tokenizer.ggml.eos_token_id", gguf.UINT32, vocab.eos)
    w.add("tokenizer.ggml.eot_token_id", gguf.UINT32, vocab.eot)
    w.add("tokenizer.ggml.add_bos_token", gguf.BOOL, True)
    w.add("tokenizer.chat_template", gguf.STRING, bpe_tokenizer.CHAT_TEMPLATE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="kjv-tiny")
    args = ap.parse_args()
    step, size = export(args.ckpt, args.vocab, args.out, args.name)
    print(f"wrote {args.out}: checkpoint of step {step}, {size} bytes")


if __name__ == "__main__":
    main()
