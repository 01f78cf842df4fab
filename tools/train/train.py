"""Trains the tiny llama on the KJV verses with AdamW and a cosine learning-rate schedule.

Every training window reads as a prompt would at run time: <s>, then a verse with its space prefix,
then the verses after it, one per line ("\n" is the byte token <0x0A>), as the tokenizer encodes
"verse\nverse\n...". One verse in a hundred is held out for the validation loss.

The schedule follows max(step / steps, elapsed / max_minutes), so a run on a slower (or busier)
machine still anneals and ends on time. A checkpoint is written every --ckpt-every steps and at the
end; export_gguf.py turns any checkpoint into the GGUF file.
"""
import argparse
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import corpus
import tokenizer
from model import Config, Llama


class Windows:
    """Training windows over a list of verses, each starting at a verse boundary."""

    def __init__(self, vocab, verses, length):
        nl = vocab.byte_id[ord("\n")]
        self.length = length
        self.first = [np.array(vocab.encode(v) + [nl], dtype=np.int64) for v in verses]
        rest = [vocab.encode(v, add_space_prefix=False) + [nl] for v in verses]
        self.starts = np.cumsum([0] + [len(r) for r in rest])
        self.stream = np.array([t for r in rest for t in r], dtype=np.int64)
        # Verses from which a whole window fits before the end of the stream.
        self.usable = [k for k in range(len(verses) - 1)
                       if self.starts[-1] - self.starts[k + 1] >= length]

    def window(self, k):
        head = np.concatenate(([tokenizer.BOS], self.first[k]))[: self.length]
        tail_start = self.starts[k + 1]
        tail = self.stream[tail_start: tail_start + self.length - len(head)]
        return np.concatenate((head, tail))

    def batch(self, ks):
        w = torch.from_numpy(np.stack([self.window(k) for k in ks]))
        return w[:, :-1], w[:, 1:]


def lr_at(progress, peak, warmup_frac, final_frac):
    if progress < warmup_frac:
        return peak * progress / warmup_frac
    p = min(1.0, (progress - warmup_frac) / (1 - warmup_frac))
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def lm_loss(model, x, y):
    """Cross-entropy (nats per token) of the model's next-token logits for x against targets y."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model, data, batches):
    model.eval()
    losses = [lm_loss(model, *data.batch(ks)).item() for ks in batches]
    model.train()
    return float(np.mean(losses))


def save_checkpoint(path, model, cfg, step, log):
    tmp = path + ".tmp"
    torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step, "log": log}, tmp)
    os.replace(tmp, path)


def training_arguments(vocab_help):
    """The options both trainers take, with train.py's defaults (train_bpe.py sets its own)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True, help="output of `bible Gen1:1-Rev22:21`")
    ap.add_argument("--vocab", required=True, help=vocab_help)
    ap.add_argument("--out", required=True, help="checkpoint file to write")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--max-minutes", type=float, default=26.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    return ap


def seed_run(args):
    """Sets torch's threads and seed; returns the numpy generator that picks the windows."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return np.random.default_rng(args.seed)


def split_verses(verses):
    """(training verses, validation verses): one verse in a hundred is held out."""
    return [v for i, v in enumerate(verses) if i % 100 != 50], verses[50::100]


def build_model(args, vocab_size):
    """The model and its AdamW optimiser (no weight decay on the norm weights)."""
    cfg = Config(vocab_size=vocab_size, dim=args.dim, n_layer=args.layers, n_head=args.heads,
                 n_head_kv=args.kv_heads, ffn_dim=args.ffn, context=args.context)
    model = Llama(cfg)
    print(f"config {cfg.to_dict()}, parameters {sum(p.numel() for p in model.parameters())}",
          flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    return cfg, model, opt


def run_training(args, cfg, model, opt, log, next_batch, evaluate, loss_fn=lm_loss):
    """Steps until --steps or --max-minutes, whichever the schedule reaches first.

    next_batch() gives the (inputs, targets) of one step and loss_fn(model, inputs, targets) its
    loss; evaluate(step, train_loss, elapsed) is called every --eval-every steps and appends to
    log, which every checkpoint saves.
    Returns (steps taken, smoothed training loss, start time).
    """
    t0 = time.time()
    train_loss = None
    step = 0
    while True:
        elapsed = time.time() - t0
        progress = max(step / args.steps, elapsed / (60 * args.max_minutes))
        if progress >= 1.0:
            break
        lr = lr_at(progress, args.lr, 0.03, 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = loss_fn(model, *next_batch())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        train_loss = loss.item() if train_loss is None else 0.95 * train_loss + 0.05 * loss.item()
        if step % 20 == 0:
            print(f"step {step} loss {train_loss:.3f} lr {lr:.2e} {elapsed:.0f}s "
                  f"({elapsed / step:.2f} s/step)", flush=True)
        if step % args.eval_every == 0:
            evaluate(step, train_loss, elapsed)
        if step % args.ckpt_every == 0:
            save_checkpoint(args.out, model, cfg, step, log)
    return step, train_loss, t0


def main():
    args = training_arguments("vocab.json from tokenizer.py").parse_args()
    rng = seed_run(args)

    vocab = tokenizer.Vocab.load(args.vocab)
    train_verses, val_verses = split_verses(corpus.read_verses(args.text))
    train = Windows(vocab, train_verses, args.context + 1)
    val = Windows(vocab, val_verses, args.context + 1)
    print(f"train tokens {len(train.stream)}, val tokens {len(val.stream)}", flush=True)
    val_batches = [[val.usable[j] for j in range(i, len(val.usable), 4)][: args.batch]
                   for i in range(4)]

    cfg, model, opt = build_model(args, len(vocab))
    log = []

    def log_val_loss(step, train_loss, elapsed):
        v = evaluate(model, val, val_batches)
        log.append({"step": step, "train_loss": train_loss, "val_loss": v, "seconds": elapsed})
        print(f"step {step} val loss {v:.3f}", flush=True)

    step, train_loss, t0 = run_training(
        args, cfg, model, opt, log,
        lambda: train.batch(rng.choice(train.usable, size=args.batch)), log_val_loss)

    v = evaluate(model, val, val_batches)
    elapsed = time.time() - t0
    log.append({"step": step, "train_loss": train_loss, "val_loss": v, "seconds": elapsed})
    print(f"done: step {step}, train loss {train_loss:.3f}, val loss {v:.3f}, {elapsed / 60:.1f} min",
          flush=True)
    save_checkpoint(args.out, model, cfg, step, log)


if __name__ == "__main__":
    main()
