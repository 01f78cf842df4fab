"""Checks a draft model against its main model (models/kjv-bpe-draft.gguf against kjv-bpe.gguf).

    - every tokenizer.* key (tokens, types, merges, special ids, add_bos, pre, chat template) is
      present in both files with the same type and value: the draft's token ids must mean
      what the main model's mean;
    - on the held-out windows of train_bpe.py (16 plain, 16 chat): KL(main || draft) per position
      and the top-1 agreement, the share of positions where the two argmaxes are the same token;
    - for a few prompts, plain and as one chat turn: the main model's greedy continuation, the
      share of its tokens the draft predicts (its argmax given the main model's text so far), and
      the draft's own greedy continuation.
Both files are read back as torch models in float32 (export_gguf.load_model), so the figures are
those of the f16 weights in the files. Exits non-zero if the tokenizer keys differ.
"""
import argparse

import torch

import export_gguf
from train_bpe import load_windows
from train_draft import agreement, greedy

PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are the"]


def tokenizer_keys(kv):
    return {k: (type(v), v) for k, v in kv.items() if k.startswith("tokenizer.")}


def compare(main, draft, vocab, ids, n_tokens):
    """Prints the main model's greedy continuation of ids, the draft's agreement along it, and the
    draft's own greedy continuation."""
    stop = {vocab.eos, vocab.eot}
    ours = greedy(main, ids, n_tokens, stop)
    with torch.no_grad():
        guess = draft(torch.tensor([ours[:-1]]))[0].argmax(-1).tolist()
    new = range(len(ids) - 1, len(ours) - 1)
    hits = sum(guess[i] == ours[i + 1] for i in new)
    print(f"main:  {vocab.decode(ours[len(ids):], show_special=True)!r}")
    print(f"draft: {vocab.decode(greedy(draft, ids, n_tokens, stop)[len(ids):], show_special=True)!r}")
    print(f"draft predicts {hits}/{len(new)} of the main model's greedy tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="../../models/kjv-bpe-draft.gguf")
    ap.add_argument("--main", default="../../models/kjv-bpe.gguf")
    ap.add_argument("--text", default="work/kjv.txt", help="output of `bible Gen1:1-Rev22:21`")
    ap.add_argument("--vocab", default="work/bpe_vocab.json")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)

    main_model, main_kv = export_gguf.load_model(args.main)
    draft, draft_kv = export_gguf.load_model(args.draft)
    keys = tokenizer_keys(main_kv)
    if tokenizer_keys(draft_kv) != keys:
        raise SystemExit(f"{args.draft}: FAILED: its tokenizer keys differ from {args.main}'s")
    print(f"{args.draft}: the {len(keys)} tokenizer keys equal {args.main}'s")

    vocab, _, val_plain, val_chat = load_windows(args.vocab, args.text, draft.cfg.context + 1)
    for name, windows in (("plain", val_plain), ("chat", val_chat)):
        kl, agree = agreement(draft, main_model, windows)
        print(f"held-out {name} windows: KL(main || draft) {kl:.3f} nats, "
              f"top-1 agreement {agree:.3f}")
    for prompt in PROMPTS:
        print(f"--- {prompt!r}:")
        compare(main_model, draft, vocab, vocab.encode(prompt, add_bos=True), args.tokens)
        print(f"--- chat {prompt!r}:")
        compare(main_model, draft, vocab, vocab.chat([("user", prompt)]), args.tokens)


if __name__ == "__main__":
    main()
