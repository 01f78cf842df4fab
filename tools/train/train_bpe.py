"""Trains models/kjv-bpe.gguf: the tiny llama on the KJV verses with the byte-level BPE vocabulary,
a share of the training windows being Llama 3 chat conversations (see chat_data.py).

The optimiser, schedule, checkpoints and time limit are those of train.py: AdamW, cosine decay on
max(step / steps, elapsed / max_minutes), a checkpoint every --ckpt-every steps and at the end.
One verse in a hundred is held out; the validation loss is reported on plain and chat windows.
train_draft.py trains the draft model on the same windows with the helpers here.
"""
import time

import numpy as np
import torch

import bpe_tokenizer
import chat_data
import corpus
from train import (build_model, lm_loss, run_training, save_checkpoint, seed_run, split_verses,
                   training_arguments)


def bpe_training_arguments():
    """train.py's options with kjv-bpe's model and run defaults, plus --chat-share."""
    ap = training_arguments("bpe_vocab.json from bpe_tokenizer.py")
    ap.add_argument("--chat-share", type=float, default=0.3, help="share of chat windows")
    ap.set_defaults(dim=192, heads=12, kv_heads=6, ffn=512, context=256, batch=8,
                    max_minutes=22.0, ckpt_every=50)
    return ap


def load_windows(vocab_path, text_path, length):
    """(vocabulary, training windows, held-out plain windows, held-out chat windows): 16 held-out
    windows of each kind, the same in every run."""
    vocab = bpe_tokenizer.Vocab.load(vocab_path)
    train_verses, val_verses = split_verses(corpus.read_verses(text_path))
    train = chat_data.Windows(vocab, train_verses, length)
    val = chat_data.Windows(vocab, val_verses, length)
    print(f"train tokens {len(train.stream)} (plain), val tokens {len(val.stream)}", flush=True)
    val_rng = np.random.default_rng(12345)
    val_ks = val.usable[:: max(1, len(val.usable) // 16)][:16]
    val_plain = [val.window(k, False, val_rng) for k in val_ks]
    val_chat = [val.window(k, True, val_rng) for k in val_ks]
    return vocab, train, val_plain, val_chat


def batch_sampler(train, args, rng):
    """next_batch for run_training: --batch random windows, each a chat one with --chat-share."""
    def next_batch():
        ks = rng.choice(train.usable, size=args.batch)
        chat = rng.random(args.batch) < args.chat_share
        w = torch.from_numpy(np.stack([train.window(k, c, rng) for k, c in zip(ks, chat)]))
        return w[:, :-1], w[:, 1:]
    return next_batch


def as_batch(windows):
    """(inputs, targets) of a list of windows."""
    w = torch.from_numpy(np.stack(windows))
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def loss_on(model, windows):
    model.eval()
    loss = lm_loss(model, *as_batch(windows)).item()
    model.train()
    return loss


def finish(args, cfg, model, log, run, evaluate):
    """Evaluates the last step unless that was done, reports and writes the final checkpoint.
    run is run_training's result."""
    step, train_loss, t0 = run
    elapsed = time.time() - t0
    if not log or log[-1]["step"] != step:
        evaluate(step, train_loss, elapsed)
    print(f"done: step {step}, train loss {train_loss:.3f}, {elapsed / 60:.1f} min", flush=True)
    save_checkpoint(args.out, model, cfg, step, log)


def main():
    args = bpe_training_arguments().parse_args()
    rng = seed_run(args)
    vocab, train, val_plain, val_chat = load_windows(args.vocab, args.text, args.context + 1)
    cfg, model, opt = build_model(args, len(vocab))
    log = []

    def evaluate(step, train_loss, elapsed):
        vp, vc = loss_on(model, val_plain), loss_on(model, val_chat)
        log.append({"step": step, "train_loss": train_loss, "val_loss_plain": vp,
                    "val_loss_chat": vc, "seconds": elapsed})
        print(f"step {step} val loss plain {vp:.3f} chat {vc:.3f}", flush=True)

    run = run_training(args, cfg, model, opt, log, batch_sampler(train, args, rng), evaluate)
    finish(args, cfg, model, log, run, evaluate)


if __name__ == "__main__":
    main()
