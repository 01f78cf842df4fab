"""Writes one tiny mixture-of-experts GGUF per architecture tensorpc runs, with an independent writer.

    python3 write_moe_ggufs.py DIR

writes DIR/mixtral.gguf (llama with experts), DIR/qwen2moe.gguf, DIR/qwen3moe.gguf and
DIR/gpt-oss.gguf with tools/train/gguf.py (numpy, no tensorpc code), laid out as llama.cpp's
convert_hf_to_gguf.py lays out converted models: its keys, its tensor names, experts stacked as
numpy arrays (n_expert, rows, cols) (GGUF ne = [cols, rows, n_expert]), routers and 1-d tensors in
F32. tests/api/moe_independent_files_test.cpp loads them and checks what it reads, so the sizes
below are a contract with that test.

Weights are random with a fixed seed, scaled like an initialised network (std 1/sqrt(fan_in)) so
activations stay in range, and the routers' logits spread wide enough that each token's choice of
experts is clear rather than a near tie.
"""
import importlib.util
import os
import sys

import numpy as np

_GGUF_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "train", "gguf.py")
_spec = importlib.util.spec_from_file_location("gguf_writer", _GGUF_PY)
gguf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gguf)

N_VOCAB = 320
# general.file_type as the converter writes it: all F32, or F16 matrices.
_FILE_TYPE = {gguf.GGML_F32: 0, gguf.GGML_F16: 1}

# name: the architecture and its sizes. head_dim None: n_embd / n_head (no key_length key).
MODELS = {
    "mixtral": dict(arch="llama", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=None, n_ff=96,
                    n_expert=4, n_expert_used=2, n_ff_exp=None, n_ff_shexp=None, dtype=gguf.GGML_F16),
    "qwen2moe": dict(arch="qwen2moe", n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=None, n_ff=96,
                     n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64, dtype=gguf.GGML_F32),
    "qwen3moe": dict(arch="qwen3moe", n_embd=64, n_layer=3, n_head=4, n_head_kv=2, head_dim=32, n_ff=96,
                     n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=None, dtype=gguf.GGML_F16),
    "gpt-oss": dict(arch="gpt-oss", n_embd=64, n_layer=4, n_head=4, n_head_kv=2, head_dim=32, n_ff=48,
                    n_expert=4, n_expert_used=2, n_ff_exp=48, n_ff_shexp=None, dtype=gguf.GGML_F32),
}


def vocabulary(w):
    """A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte-fallback tokens, then "▁",
    letters, "▁"+letter and unique fillers, so ordinary text tokenizes to several ids."""
    tokens, types = ["<unk>", "<s>", "</s>"], [2, 3, 3]  # unknown, control
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)  # byte
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    pieces = ["\u2581"] + list(letters) + ["\u2581" + c for c in letters]
    i = 0
    while len(tokens) < N_VOCAB:
        tokens.append(pieces[i] if i < len(pieces) else f"\u2581w{i}")
        types.append(1)  # normal
        i += 1
    w.add("tokenizer.ggml.model", gguf.STRING, "llama")
    w.add_array("tokenizer.ggml.tokens", gguf.STRING, tokens)
    w.add_array("tokenizer.ggml.scores", gguf.FLOAT32, [-float(i) for i in range(len(tokens))])
    w.add_array("tokenizer.ggml.token_type", gguf.INT32, types)
    w.add("tokenizer.ggml.bos_token_id", gguf.UINT32, 1)
    w.add("tokenizer.ggml.eos_token_id", gguf.UINT32, 2)
    w.add("tokenizer.ggml.unknown_token_id", gguf.UINT32, 0)
    w.add("tokenizer.ggml.add_bos_token", gguf.BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", gguf.BOOL, False)


def write_model(path, name, m, rng):
    arch, E, H, KV_H = m["arch"], m["n_embd"], m["n_head"], m["n_head_kv"]
    hd = m["head_dim"] or E // H
    Q, KV = H * hd, KV_H * hd
    X, FX = m["n_expert"], m["n_ff_exp"] or m["n_ff"]
    dtype = m["dtype"]
    w = gguf.Writer()
    u32 = lambda key, v: w.add(f"{arch}.{key}", gguf.UINT32, v)
    f32 = lambda key, v: w.add(f"{arch}.{key}", gguf.FLOAT32, v)

    w.add("general.architecture", gguf.STRING, arch)
    w.add("general.name", gguf.STRING, f"independent-{name}")
    w.add("general.file_type", gguf.UINT32, _FILE_TYPE[dtype])
    w.add("general.quantization_version", gguf.UINT32, 2)
    u32("vocab_size", N_VOCAB)
    u32("context_length", 256)
    u32("embedding_length", E)
    u32("block_count", m["n_layer"])
    u32("feed_forward_length", m["n_ff"])
    u32("attention.head_count", H)
    u32("attention.head_count_kv", KV_H)
    if m["head_dim"]:
        u32("attention.key_length", hd)
        u32("attention.value_length", hd)
    u32("rope.dimension_count", hd)
    f32("rope.freq_base", 150000.0 if arch == "gpt-oss" else 1000000.0)
    f32("attention.layer_norm_rms_epsilon", 1e-6 if arch.startswith("qwen") else 1e-5)
    u32("expert_count", X)
    u32("expert_used_count", m["n_expert_used"])
    if m["n_ff_exp"]:  # Mixtral's converter writes none: its experts are feed_forward_length wide
        u32("expert_feed_forward_length", m["n_ff_exp"])
    if m["n_ff_shexp"]:
        u32("expert_shared_feed_forward_length", m["n_ff_shexp"])
    if arch == "gpt-oss":  # a window shorter than the test's text, and YaRN as gpt-oss ships
        u32("attention.sliding_window", 8)
        w.add(f"{arch}.rope.scaling.type", gguf.STRING, "yarn")
        f32("rope.scaling.factor", 4.0)
        u32("rope.scaling.original_context_length", 64)
    vocabulary(w)

    def normal(shape, std, mean=0.0):
        return rng.normal(mean, std, size=shape).astype(np.float32)

    # A torch Linear's weight (out, in): GGUF ne = [in, out].
    def linear(tensor, n_out, n_in):
        w.add_tensor(tensor, normal((n_out, n_in), 1.0 / np.sqrt(n_in)), dtype)

    def f32_tensor(tensor, shape, std, mean=0.0):
        w.add_tensor(tensor, normal(shape, std, mean), gguf.GGML_F32)

    def norm(tensor, n):
        f32_tensor(tensor, (n,), 0.1, mean=1.0)

    # n_expert Linear weights (out, in) stacked: GGUF ne = [in, out, n_expert].
    def experts(tensor, n_out, n_in):
        w.add_tensor(tensor, normal((X, n_out, n_in), 1.0 / np.sqrt(n_in)), dtype)

    w.add_tensor("token_embd.weight", normal((N_VOCAB, E), 1.0), dtype)  # read a row a token: unit scale
    for il in range(m["n_layer"]):
        p = f"blk.{il}."
        norm(p + "attn_norm.weight", E)
        linear(p + "attn_q.weight", Q, E)
        linear(p + "attn_k.weight", KV, E)
        linear(p + "attn_v.weight", KV, E)
        if arch in ("qwen2moe", "gpt-oss"):
            for t, n in (("attn_q", Q), ("attn_k", KV), ("attn_v", KV)):
                f32_tensor(p + t + ".bias", (n,), 0.5)
        if arch == "qwen3moe":
            norm(p + "attn_q_norm.weight", hd)
            norm(p + "attn_k_norm.weight", hd)
        linear(p + "attn_output.weight", E, Q)
        if arch == "gpt-oss":
            f32_tensor(p + "attn_output.bias", (E,), 0.5)
            f32_tensor(p + "attn_sinks.weight", (H,), 1.0)
        norm(p + ("post_attention_norm.weight" if arch == "gpt-oss" else "ffn_norm.weight"), E)
        # The router: F32 as the converter keeps it; std 0.5 over a normed input of n_embd
        # gives logits of std about 4, so the top experts stand clear of the rest.
        f32_tensor(p + "ffn_gate_inp.weight", (X, E), 0.5)
        experts(p + "ffn_gate_exps.weight", FX, E)
        experts(p + "ffn_up_exps.weight", FX, E)
        experts(p + "ffn_down_exps.weight", E, FX)
        if arch == "gpt-oss":
            f32_tensor(p + "ffn_gate_inp.bias", (X,), 0.5)
            # wide enough that some gate and up values pass gpt-oss's clamp at ±7
            f32_tensor(p + "ffn_gate_exps.bias", (X, FX), 3.0)
            f32_tensor(p + "ffn_up_exps.bias", (X, FX), 3.0)
            f32_tensor(p + "ffn_down_exps.bias", (X, E), 0.5)
        if m["n_ff_shexp"]:
            FS = m["n_ff_shexp"]
            f32_tensor(p + "ffn_gate_inp_shexp.weight", (1, E), 0.5)  # Linear(n_embd, 1): ne [n_embd, 1]
            linear(p + "ffn_gate_shexp.weight", FS, E)
            linear(p + "ffn_up_shexp.weight", FS, E)
            linear(p + "ffn_down_shexp.weight", E, FS)
    norm("output_norm.weight", E)
    linear("output.weight", N_VOCAB, E)
    w.write(path)


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    rng = np.random.default_rng(4)
    for name, m in MODELS.items():
        write_model(os.path.join(sys.argv[1], name + ".gguf"), name, m, rng)


if __name__ == "__main__":
    main()
