"""Checks the tokenizer keys of a byte-level BPE GGUF file (models/kjv-bpe.gguf) for consistency.

    - tokenizer.ggml.model is "gpt2", tokenizer.ggml.pre "llama-bpe"; tokens, token_type and
      llama.vocab_size agree in length, and token_embd / output have that many rows;
    - ids 0..255 are the 256 byte symbols; every token is written in the byte-symbol alphabet;
    - every merge "a b" has two parts, and a, b and a + b are all normal tokens;
    - bos / eos / eot ids are <|begin_of_text|>, <|end_of_text|>, <|eot_id|>, all control tokens,
      as are <|start_header_id|> and <|end_header_id|>; add_bos_token is true;
    - the chat template is the Llama 3 one and holds the <|start_header_id|> marker;
    - encoding then decoding the KJV sample text gives it back.
Prints a summary and exits non-zero on the first failure.
"""
import argparse
import sys

import bpe_tokenizer as bt
import gguf


def check(path):
    r = gguf.Reader(path)
    kv = r.kv

    def expect(cond, what):
        if not cond:
            raise SystemExit(f"{path}: FAILED: {what}")

    expect(kv["tokenizer.ggml.model"] == "gpt2", "tokenizer.ggml.model is gpt2")
    expect(kv["tokenizer.ggml.pre"] == bt.PRE_NAME, "tokenizer.ggml.pre is llama-bpe")
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    n = len(tokens)
    expect(len(types) == n == kv["llama.vocab_size"], "tokens, token_type and vocab_size agree")
    for name in ("token_embd.weight", "output.weight"):
        expect(r.tensors[name].shape[0] == n, f"{name} has one row per token")
    expect(tokens[:256] == bt.BYTE_SYMBOL, "ids 0..255 are the byte symbols")
    expect(all(t in bt.SPECIALS or all(c in bt.SYMBOL_BYTE for c in t) for t in tokens),
           "every normal token is in the byte-symbol alphabet")
    merges = kv["tokenizer.ggml.merges"]
    expect(all(len(m.split(" ")) == 2 for m in merges), "every merge is two parts")
    vocab = bt.Vocab.from_gguf_kv(kv)
    vocab.check()  # merge parts and results are normal tokens; no duplicates; specials control
    ids = {"bos": ("tokenizer.ggml.bos_token_id", "<|begin_of_text|>"),
           "eos": ("tokenizer.ggml.eos_token_id", "<|end_of_text|>"),
           "eot": ("tokenizer.ggml.eot_token_id", "<|eot_id|>")}
    for key, text in ids.values():
        expect(tokens[kv[key]] == text and types[kv[key]] == bt.TYPE_CONTROL,
               f"{key} = {kv[key]} is the control token {text}")
    expect(kv["tokenizer.ggml.add_bos_token"] is True, "add_bos_token is true")
    tmpl = kv["tokenizer.chat_template"]
    expect(tmpl == bt.CHAT_TEMPLATE and "<|start_header_id|>" in tmpl, "Llama 3 chat template")
    text = "In the beginning God created the heaven and the earth.\nAnd the LORD's 144,000: 'yea'!\n"
    expect(vocab.decode(vocab.encode(text)) == text, "encode/decode round trip")
    n_special = sum(t == bt.TYPE_CONTROL for t in types)
    print(f"{path}: ok: {n} tokens (256 bytes, {len(merges)} merges, {n_special} control), "
          f"bos {kv['tokenizer.ggml.bos_token_id']}, eos {kv['tokenizer.ggml.eos_token_id']}, "
          f"eot {kv['tokenizer.ggml.eot_token_id']}, pre {kv['tokenizer.ggml.pre']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/kjv-bpe.gguf")
    check(ap.parse_args().model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
