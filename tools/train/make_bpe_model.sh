#!/usr/bin/env bash
# Remakes models/kjv-bpe.gguf from nothing: installs the Debian packages, prints the King James
# Bible, learns the byte-level BPE vocabulary, trains on plain verses and Llama 3 chat
# conversations (about 22 minutes on one CPU core), exports, checks the tokenizer keys and samples
# a plain continuation and a chat reply.
# Run by hand, never by CI. Intermediate files go to tools/train/work/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")"
MODEL=../../models/kjv-bpe.gguf
PY=/usr/bin/python3  # Debian's python, which has python3-torch
SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)

$SUDO apt-get install -y python3-torch python3-numpy python3-regex bible-kjv
mkdir -p work "$(dirname "$MODEL")"
bible Gen1:1-Rev22:21 > work/kjv.txt
$PY bpe_tokenizer.py --text work/kjv.txt --vocab-size 4096 --out work/bpe_vocab.json
$PY train_bpe.py --text work/kjv.txt --vocab work/bpe_vocab.json --out work/bpe_ckpt.pt "$@" 2>&1 | tee work/bpe_train.log
$PY export_gguf.py --ckpt work/bpe_ckpt.pt --vocab work/bpe_vocab.json --out "$MODEL" --name kjv-bpe
$PY check_bpe_gguf.py --model "$MODEL"
$PY sample.py --model "$MODEL" --prompt "In the beginning" --tokens 64
