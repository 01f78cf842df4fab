"""A SentencePiece-style BPE vocabulary: training, encoding, decoding.

Text is normalised the SentencePiece way: every space becomes "▁" (U+2581) and one "▁" is put in
front of the text (add_space_prefix). Vocabulary layout (what the GGUF file stores):

    id 0      <unk>          type 2 (unknown)
    id 1      <s>            type 3 (control)
    id 2      </s>           type 3 (control)
    ids 3..258 <0x00>..<0xFF> type 6 (byte fallback)
    then      learned pieces type 1 (normal): the merges in the order learned, then the single
              characters of the text (newline excepted: it is left to the byte token <0x0A>)

Scores: the piece made by merge number r (0-based) scores -r; the single characters score below
every merge; controls and bytes score 0.

Encoding is the SentencePiece "llama" algorithm: start from the UTF-8 characters; repeatedly merge
the adjacent pair whose concatenation is a piece with the highest score (leftmost on ties) until
no pair merges; a symbol that is not a piece is written as its UTF-8 byte tokens.

Why encoding may go word by word: a learned piece holds "▁" only as its first character and never
holds a newline, so no merge can span the start of a "▁"-word or a newline. Cutting the text there
and encoding each part alone gives exactly what the algorithm gives on the whole text.
"""
import collections
import json

from bpe_merges import learn_merges

SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6
N_SPECIAL = 3 + 256


def normalize(text, add_space_prefix=True):
    text = text.replace(" ", SPACE)
    return SPACE + text if add_space_prefix else text


def split_words(normalized):
    """Cuts normalised text before every "▁" and around every newline."""
    words, start = [], 0
    for i, ch in enumerate(normalized):
        if ch == "\n":
            if start < i:
                words.append(normalized[start:i])
            words.append("\n")
            start = i + 1
        elif ch == SPACE and start < i:
            words.append(normalized[start:i])
            start = i
    if start < len(normalized):
        words.append(normalized[start:])
    return words


def train(lines, vocab_size):
    """Learns a vocabulary of vocab_size pieces (specials and bytes included) from lines of text.

    Each line is normalised on its own (with the space prefix, and also without it, since a line
    that follows a newline inside a longer text has no "▁" in front). Returns a Vocab.
    """
    word_counts = collections.Counter()
    for line in lines:
        for prefixed in (True, False):
            word_counts.update(split_words(normalize(line, prefixed)))
    word_counts.pop("\n", None)
    chars = sorted({ch for w in word_counts for ch in w})
    n_merges = vocab_size - N_SPECIAL - len(chars)
    if n_merges <= 0:
        raise ValueError(f"vocab_size {vocab_size} leaves no room for merges")

    words = [list(w) for w in word_counts]
    counts = [word_counts[w] for w in word_counts]
    merges = [a + b for a, b in learn_merges(words, counts, n_merges)]

    pieces = merges + [c for c in chars if c not in set(merges)]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * N_SPECIAL + [-float(r) for r in range(len(pieces))]
    types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * 256 + [TYPE_NORMAL] * len(pieces)
    return Vocab(tokens, scores, types)


class Vocab:
    def __init__(self, tokens, scores, types):
        self.tokens, self.scores, self.types = list(tokens), list(scores), list(types)
        self.piece_id = {t: i for i, t in enumerate(tokens) if types[i] == TYPE_NORMAL}
        self.byte_id = {int(t[3:5], 16): i for i, t in enumerate(tokens) if types[i] == TYPE_BYTE}
        self._word_cache = {}

    def __len__(self):
        return len(self.tokens)

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tokens": self.tokens, "scores": self.scores, "types": self.types}, f,
                      ensure_ascii=False, indent=0)

    @staticmethod
    def load(path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return Vocab(d["tokens"], d["scores"], d["types"])

    def encode(self, text, add_bos=False, add_space_prefix=True):
        ids = [BOS] if add_bos else []
        for word in split_words(normalize(text, add_space_prefix)):
            ids.extend(self.encode_word(word))
        return ids

    def encode_word(self, word):
        ids = self._word_cache.get(word)
        if ids is None:
            ids = self._encode_llama(word)
            self._word_cache[word] = ids
        return ids

    def _encode_llama(self, text):
        syms = list(text)
        while len(syms) > 1:
            best_i, best_score = -1, None
            for i in range(len(syms) - 1):
                pid = self.piece_id.get(syms[i] + syms[i + 1])
                if pid is not None and (best_score is None or self.scores[pid] > best_score):
                    best_i, best_score = i, self.scores[pid]
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        ids = []
        for s in syms:
            pid = self.piece_id.get(s)
            if pid is not None:
                ids.append(pid)
            else:
                ids.extend(self.byte_id[b] for b in s.encode("utf-8"))
        return ids

    def decode(self, ids):
        """Token ids to text; controls are dropped, as is the space prefix of the first word."""
        out = bytearray()
        for i in ids:
            t = self.types[i]
            if t == TYPE_BYTE:
                out.append(int(self.tokens[i][3:5], 16))
            elif t == TYPE_NORMAL:
                out.extend(self.tokens[i].replace(SPACE, " ").encode("utf-8"))
        text = out.decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text


def main():
    import argparse

    import corpus

    ap = argparse.ArgumentParser(description="Learns the vocabulary from the KJV text.")
    ap.add_argument("--text", required=True, help="output of `bible Gen1:1-Rev22:21`")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--out", required=True, help="vocab.json to write")
    args = ap.parse_args()
    vocab = train(corpus.read_verses(args.text), args.vocab_size)
    vocab.save(args.out)
    print(f"{len(vocab)} tokens written to {args.out}")


if __name__ == "__main__":
    main()
