"""Trains models/kjv-bpe-draft.gguf: a smaller llama that predicts what models/kjv-bpe.gguf (the
teacher) predicts, as the draft model of speculative decoding.

The draft proposes tokens that the main model then checks, so what counts is agreement with the
main model, not with the text: the loss is KL(teacher softmax || student softmax) at every position
of the training windows of train_bpe.py (plain verses and Llama 3 chat conversations, the same chat
share). The teacher is read from its GGUF file into the torch Llama and runs under no_grad. Before
training, the teacher's validation loss is printed and its greedy continuation of "In the
beginning" is checked against sample.py's numpy forward pass; the vocabulary must be the
teacher's, token for token. Reported on the held-out windows, plain and chat apart: the KL and the
top-1 agreement (the share of positions where the student's argmax is the teacher's).

Optimiser, schedule, checkpoints and time limit are train.py's.
"""
import torch
import torch.nn.functional as F

import bpe_tokenizer
import export_gguf
import sample
from train import build_model, run_training, seed_run
from train_bpe import as_batch, batch_sampler, bpe_training_arguments, finish, load_windows, loss_on


def kl_div(teacher_logits, student_logits):
    """The mean over positions of KL(teacher softmax || student softmax), in nats."""
    t = F.log_softmax(teacher_logits, dim=-1).flatten(0, 1)
    s = F.log_softmax(student_logits, dim=-1).flatten(0, 1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean")


def distill_loss(teacher):
    """loss_fn for run_training: kl_div of the teacher's and the model's logits (the targets,
    the text's next tokens, are not used)."""
    def loss(model, x, _targets):
        with torch.no_grad():
            t = teacher(x)
        return kl_div(t, model(x))
    return loss


@torch.no_grad()
def agreement(student, teacher, windows):
    """(KL(teacher || student) in nats per position, top-1 agreement) over the windows."""
    student.eval()
    x, _ = as_batch(windows)
    t, s = teacher(x), student(x)
    student.train()
    return kl_div(t, s).item(), (t.argmax(-1) == s.argmax(-1)).float().mean().item()


@torch.no_grad()
def greedy(model, ids, n_tokens, stop=()):
    """ids followed by up to n_tokens greedy ones (the whole sequence recomputed every step)."""
    ids = list(ids)
    for _ in range(n_tokens):
        ids.append(int(model(torch.tensor([ids[-model.cfg.context:]]))[0, -1].argmax()))
        if ids[-1] in stop:
            break
    return ids


def check_teacher(teacher, path, vocab, val_plain, val_chat):
    """Fails unless the teacher's greedy continuation of "In the beginning" is sample.py's."""
    print(f"teacher val loss plain {loss_on(teacher, val_plain):.3f} "
          f"chat {loss_on(teacher, val_chat):.3f}", flush=True)
    prompt = vocab.encode("In the beginning", add_bos=True)
    ours, reference = greedy(teacher, prompt, 32), sample.GgufLlama(path).generate(prompt, 32)
    if ours != reference:
        raise SystemExit(f"teacher greedy {ours} differs from sample.py's {reference}")
    print(f"teacher greedy = sample.py's: {vocab.decode(ours)!r}", flush=True)


def check_same_vocab(vocab, kv):
    """Fails unless the vocabulary file is the teacher's: tokens, types and merges."""
    theirs = bpe_tokenizer.Vocab.from_gguf_kv(kv)
    if (vocab.tokens, vocab.types, vocab.merge_strings()) != \
            (theirs.tokens, theirs.types, theirs.merge_strings()):
        raise SystemExit("the vocabulary differs from the teacher's")


def main():
    ap = bpe_training_arguments()
    ap.add_argument("--teacher", default="../../models/kjv-bpe.gguf", help="the main model")
    ap.set_defaults(dim=128, layers=2, heads=8, kv_heads=4, ffn=384, context=256, batch=8,
                    max_minutes=22.0, ckpt_every=50)
    args = ap.parse_args()
    rng = seed_run(args)
    teacher, kv = export_gguf.load_model(args.teacher)
    teacher.requires_grad_(False)
    vocab, train, val_plain, val_chat = load_windows(args.vocab, args.text, args.context + 1)
    check_same_vocab(vocab, kv)
    check_teacher(teacher, args.teacher, vocab, val_plain, val_chat)
    cfg, model, opt = build_model(args, len(vocab))
    log = []

    def evaluate(step, train_loss, elapsed):
        (kp, ap_), (kc, ac) = agreement(model, teacher, val_plain), agreement(model, teacher, val_chat)
        log.append({"step": step, "train_kl": train_loss, "val_kl_plain": kp, "val_kl_chat": kc,
                    "agree_plain": ap_, "agree_chat": ac, "seconds": elapsed})
        print(f"step {step} val KL plain {kp:.3f} chat {kc:.3f}, "
              f"top-1 agreement plain {ap_:.3f} chat {ac:.3f}", flush=True)

    run = run_training(args, cfg, model, opt, log, batch_sampler(train, args, rng), evaluate,
                       distill_loss(teacher))
    finish(args, cfg, model, log, run, evaluate)


if __name__ == "__main__":
    main()
