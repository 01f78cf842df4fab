"""Loads a GGUF llama file and generates text from a prompt, in float64 numpy.

This is the reference forward pass: it reads only the GGUF file (weights, hyper-parameters and
vocabulary), so a runtime that loads the same file should produce the same greedy tokens.
Every step recomputes the whole sequence (no KV cache): slow, but nothing to get wrong.

Both vocabularies are read from the file: tokenizer.ggml.model "llama" (kjv-tiny, tokenizer.py)
and "gpt2" (kjv-bpe, bpe_tokenizer.py). A file with a chat template (kjv-bpe) also answers --chat
as one user turn of the Llama 3 chat format, generating until <|eot_id|>.
"""
import argparse

import numpy as np

import bpe_tokenizer
import gguf
import tokenizer


class GgufLlama:
    def __init__(self, path):
        r = gguf.Reader(path)
        kv = r.kv
        if kv["general.architecture"] != "llama":
            raise ValueError(f"{path}: architecture {kv['general.architecture']}, expected llama")
        self.n_layer = kv["llama.block_count"]
        self.n_head = kv["llama.attention.head_count"]
        self.n_head_kv = kv["llama.attention.head_count_kv"]
        self.dim = kv["llama.embedding_length"]
        self.head_dim = self.dim // self.n_head
        self.n_rot = kv["llama.rope.dimension_count"]
        self.rope_base = kv["llama.rope.freq_base"]
        self.eps = kv["llama.attention.layer_norm_rms_epsilon"]
        self.context = kv["llama.context_length"]
        # Weights as float64, in the torch layout: a GGUF [in, out] matrix becomes [out, in].
        self.w = {name: t.astype(np.float64) for name, t in r.tensors.items()}
        if kv["tokenizer.ggml.model"] == "gpt2":
            self.vocab = bpe_tokenizer.Vocab.from_gguf_kv(kv)
        else:
            self.vocab = tokenizer.Vocab(kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"],
                                         kv["tokenizer.ggml.token_type"])
        self.bos = kv["tokenizer.ggml.bos_token_id"]
        self.eos = kv["tokenizer.ggml.eos_token_id"]
        # Generation stops at the end of text and, where the file names one, the end of a turn.
        self.stop = {self.eos, kv.get("tokenizer.ggml.eot_token_id", self.eos)}
        self.has_chat = "tokenizer.chat_template" in kv

    def rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x):
        """x: [seq, heads, head_dim]; rotates pairs (x[2i], x[2i+1]) by pos * base^(-2i/n_rot)."""
        seq = x.shape[0]
        inv_freq = self.rope_base ** (-np.arange(0, self.n_rot, 2) / self.n_rot)
        angle = np.arange(seq)[:, None] * inv_freq[None, :]            # [seq, n_rot/2]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        out = x.copy()
        x0, x1 = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
        out[..., 0:self.n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:self.n_rot:2] = x0 * sin + x1 * cos
        return out

    def logits(self, tokens):
        """Logits [vocab] for the token after the sequence `tokens`."""
        w, seq, hd = self.w, len(tokens), self.head_dim
        x = w["token_embd.weight"][tokens]                                # [seq, dim]
        causal = np.triu(np.full((seq, seq), -np.inf), 1)
        group = self.n_head // self.n_head_kv
        for i in range(self.n_layer):
            p = f"blk.{i}."
            # Attention: h = norm(x); q, k, v = h W^T; rope on q and k; softmax(q k^T / sqrt(hd)) v.
            h = self.rms_norm(x, w[p + "attn_norm.weight"])
            q = self.rope((h @ w[p + "attn_q.weight"].T).reshape(seq, self.n_head, hd))
            k = self.rope((h @ w[p + "attn_k.weight"].T).reshape(seq, self.n_head_kv, hd))
            v = (h @ w[p + "attn_v.weight"].T).reshape(seq, self.n_head_kv, hd)
            heads = []
            for j in range(self.n_head):
                kj, vj = k[:, j // group], v[:, j // group]  # query head j reads kv head j // group
                scores = q[:, j] @ kj.T / np.sqrt(hd) + causal
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                heads.append((scores / scores.sum(axis=-1, keepdims=True)) @ vj)
            x = x + np.concatenate(heads, axis=-1) @ w[p + "attn_output.weight"].T
            # Feed-forward: x += down(silu(gate(h)) * up(h)), h = norm(x).
            h = self.rms_norm(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            up = h @ w[p + "ffn_up.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
        x = self.rms_norm(x[-1], w["output_norm.weight"])
        return x @ w["output.weight"].T

    def generate(self, prompt, n_tokens, temperature=0.0, seed=0):
        """Returns the token ids of the prompt (text: encoded with BOS in front; or a list of ids)
        followed by up to n_tokens new ones. temperature 0 is greedy (argmax; the lowest id on
        ties)."""
        rng = np.random.default_rng(seed)
        tokens = self.vocab.encode(prompt, add_bos=True) if isinstance(prompt, str) else list(prompt)
        for _ in range(n_tokens):
            logits = self.logits(tokens[-self.context:])
            if temperature <= 0:
                nxt = int(np.argmax(logits))
            else:
                p = np.exp((logits - logits.max()) / temperature)
                nxt = int(rng.choice(len(p), p=p / p.sum()))
            tokens.append(nxt)
            if nxt in self.stop:
                break
        return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/kjv-tiny.gguf")
    ap.add_argument("--prompt", default="In the beginning")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ids", action="store_true", help="also print the token ids")
    ap.add_argument("--chat", default="In the beginning God created the heaven and the earth.",
                    help="user message for a model with a chat template")
    ap.add_argument("--system", default="", help="system prompt for --chat (none if empty)")
    args = ap.parse_args()
    model = GgufLlama(args.model)
    for label, temp in (("greedy", 0.0), (f"temperature {args.temperature}", args.temperature)):
        ids = model.generate(args.prompt, args.tokens, temp, args.seed)
        print(f"--- {label}:")
        print(model.vocab.decode(ids))
        if args.ids:
            print(ids)
    if not model.has_chat or not args.chat:
        return
    messages = ([("system", args.system)] if args.system else []) + [("user", args.chat)]
    prompt = model.vocab.chat(messages)
    for label, temp in (("greedy", 0.0), (f"temperature {args.temperature}", args.temperature)):
        ids = model.generate(prompt, args.tokens, temp, args.seed)
        print(f"--- chat, {label}:")
        print(model.vocab.decode(ids, show_special=True))
        if args.ids:
            print(ids)


if __name__ == "__main__":
    main()
