#!/usr/bin/env bash
# Remakes models/kjv-tiny.gguf from nothing: installs the Debian packages, prints the King James
# Bible, learns the vocabulary, trains (about 26 minutes on one CPU core), exports and samples.
# Run by hand, never by CI. Intermediate files go to tools/train/work/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")"
MODEL=../../models/kjv-tiny.gguf
PY=/usr/bin/python3  # Debian's python, which has python3-torch
SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)

$SUDO apt-get install -y python3-torch python3-numpy bible-kjv
mkdir -p work "$(dirname "$MODEL")"
bible Gen1:1-Rev22:21 > work/kjv.txt
$PY tokenizer.py --text work/kjv.txt --vocab-size 2048 --out work/vocab.json
$PY train.py --text work/kjv.txt --vocab work/vocab.json --out work/ckpt.pt "$@" 2>&1 | tee work/train.log
$PY export_gguf.py --ckpt work/ckpt.pt --vocab work/vocab.json --out "$MODEL"
$PY sample.py --model "$MODEL" --prompt "In the beginning" --tokens 64
