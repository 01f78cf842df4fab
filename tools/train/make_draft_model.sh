#!/usr/bin/env bash
# Remakes models/kjv-bpe-draft.gguf, the draft model of models/kjv-bpe.gguf for speculative
# decoding: installs the Debian packages, prints the King James Bible and learns the BPE vocabulary
# if work/ lacks them, trains the draft to agree with kjv-bpe.gguf (about 22 minutes on one CPU
# core), exports, checks that its tokenizer keys are kjv-bpe.gguf's and prints how well it agrees.
# Run by hand, never by CI. Intermediate files go to tools/train/work/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")"
MAIN=../../models/kjv-bpe.gguf
MODEL=../../models/kjv-bpe-draft.gguf
PY=/usr/bin/python3  # Debian's python, which has python3-torch
SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)

$SUDO apt-get install -y python3-torch python3-numpy python3-regex bible-kjv
mkdir -p work
[ -s work/kjv.txt ] || bible Gen1:1-Rev22:21 > work/kjv.txt
[ -s work/bpe_vocab.json ] ||
  $PY bpe_tokenizer.py --text work/kjv.txt --vocab-size 4096 --out work/bpe_vocab.json
$PY train_draft.py --text work/kjv.txt --vocab work/bpe_vocab.json --out work/draft_ckpt.pt \
  --teacher "$MAIN" "$@" 2>&1 | tee work/draft_train.log
$PY export_gguf.py --ckpt work/draft_ckpt.pt --vocab work/bpe_vocab.json --out "$MODEL" --name kjv-bpe-draft
$PY check_bpe_gguf.py --model "$MODEL"
$PY check_draft.py --draft "$MODEL" --main "$MAIN" --text work/kjv.txt --vocab work/bpe_vocab.json
