"""Trains models/kjv-bpe.gguf: the tiny llama on the KJV verses with the byte-level BPE vocabulary,
a share of the training windows being Llama 3 chat conversations (see chat_data.py).

The optimiser, schedule, checkpoints and time limit are those of train.py: AdamW, cosine decay on
max(step / steps, elapsed / max_minutes), a checkpoint every --ckpt-every steps and at the end.
One verse in a hundred is held out; the validation loss is reported on plain and chat windows.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

import bpe_tokenizer
import chat_data
import corpus
from model import Config, Llama
from train import lr_at, save_checkpoint


@torch.no_grad()
def loss_on(model, windows):
    model.eval()
    w = torch.from_numpy(np.stack(windows))
    logits = model(w[:, :-1])
    model.train()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True, help="output of `bible Gen1:1-Rev22:21`")
    ap.add_argument("--vocab", required=True, help="bpe_vocab.json from bpe_tokenizer.py")
    ap.add_argument("--out", required=True, help="checkpoint file to write")
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=6)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--chat-share", type=float, default=0.3, help="share of chat windows")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--max-minutes", type=float, default=22.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    vocab = bpe_tokenizer.Vocab.load(args.vocab)
    verses = corpus.read_verses(args.text)
    val_verses = verses[50::100]
    train_verses = [v for i, v in enumerate(verses) if i % 100 != 50]
    train = chat_data.Windows(vocab, train_verses, args.context + 1)
    val = chat_data.Windows(vocab, val_verses, args.context + 1)
    print(f"train tokens {len(train.stream)} (plain), val tokens {len(val.stream)}", flush=True)
    val_rng = np.random.default_rng(12345)
    val_ks = val.usable[:: max(1, len(val.usable) // 16)][:16]
    val_plain = [val.window(k, False, val_rng) for k in val_ks]
    val_chat = [val.window(k, True, val_rng) for k in val_ks]

    cfg = Config(vocab_size=len(vocab), dim=args.dim, n_layer=args.layers, n_head=args.heads,
                 n_head_kv=args.kv_heads, ffn_dim=args.ffn, context=args.context)
    model = Llama(cfg)
    print(f"config {cfg.to_dict()}, parameters {sum(p.numel() for p in model.parameters())}",
          flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    def evaluate(step, elapsed):
        vp, vc = loss_on(model, val_plain), loss_on(model, val_chat)
        log.append({"step": step, "train_loss": train_loss, "val_loss_plain": vp,
                    "val_loss_chat": vc, "seconds": elapsed})
        print(f"step {step} val loss plain {vp:.3f} chat {vc:.3f}", flush=True)

    log = []
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
        ks = rng.choice(train.usable, size=args.batch)
        chat = rng.random(args.batch) < args.chat_share
        w = torch.from_numpy(np.stack([train.window(k, c, rng) for k, c in zip(ks, chat)]))
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
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
            evaluate(step, elapsed)
        if step % args.ckpt_every == 0:
            save_checkpoint(args.out, model, cfg, step, log)

    elapsed = time.time() - t0
    if not log or log[-1]["step"] != step:
        evaluate(step, elapsed)
    print(f"done: step {step}, train loss {train_loss:.3f}, {elapsed / 60:.1f} min", flush=True)
    save_checkpoint(args.out, model, cfg, step, log)


if __name__ == "__main__":
    main()
