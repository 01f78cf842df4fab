"""A byte-level BPE vocabulary in the Llama 3 style: training, encoding, decoding.

Used for models/kjv-bpe.gguf (tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "llama-bpe").

Alphabet. Every byte is one symbol, a single Unicode character (the GPT-2 byte-to-unicode mapping):
the printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the other 68
bytes (controls, space, 0x7F..0xA0, 0xAD), in increasing order, become U+0100, U+0101, ... So a
space is "Ġ" (U+0120) and a newline "Ċ" (U+010A). Token texts and merges are written in this
alphabet.

Pre-tokenization. Text is first cut into pre-tokens by the Llama 3 expression (PRE_PATTERN below);
merges never cross a pre-token boundary.

Vocabulary layout (what the GGUF file stores):

    ids 0..255         the 256 byte symbols, in byte order           type 1 (normal)
    then               one token per merge, in the order learned      type 1 (normal)
    the last five      <|begin_of_text|> (BOS), <|end_of_text|> (EOS),
                       <|start_header_id|>, <|end_header_id|>,
                       <|eot_id|> (end of turn)                       type 3 (control)

Merge number r (rank r) joins two adjacent tokens a, b into the token a + b; the file lists them as
"a b" in rank order. Training counts adjacent pairs inside pre-tokens (each pre-token weighted by
its frequency) and repeatedly merges the most frequent pair.

Encoding a pre-token: if its whole symbol string is a token, that token (the llama-bpe
"ignore merges" rule); otherwise start from its byte symbols and repeatedly merge the adjacent pair
with the lowest rank (leftmost on ties) until no adjacent pair has a merge. Special tokens are never
produced from text: callers put their ids in directly.
"""
import collections
import json

import regex

from bpe_merges import learn_merges

# The Llama 3 pre-tokenizer (tiktoken cl100k style): contractions, letters with at most one
# non-letter, non-digit character in front, digits in groups of up to three, other symbols (with
# any newlines that follow), newline runs, and whitespace that leaves its last space to a word.
PRE_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_NAME = "llama-bpe"
_PRE = regex.compile(PRE_PATTERN)

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"]
TYPE_NORMAL, TYPE_CONTROL = 1, 3

# The Llama 3 instruct chat template (Meta's published Jinja text).
CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def byte_to_unicode():
    """The GPT-2 mapping: a list of 256 one-character strings, indexed by byte value."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
                 + list(range(0xAE, 0xFF + 1)))
    table, extra = [], 0
    for b in range(256):
        if b in printable:
            table.append(chr(b))
        else:
            table.append(chr(0x100 + extra))
            extra += 1
    return table


BYTE_SYMBOL = byte_to_unicode()
SYMBOL_BYTE = {s: b for b, s in enumerate(BYTE_SYMBOL)}


def pre_tokenize(text):
    return _PRE.findall(text)


def to_symbols(piece):
    """A pre-token as its string of byte symbols."""
    return "".join(BYTE_SYMBOL[b] for b in piece.encode("utf-8"))


def train(word_counts, vocab_size):
    """Learns vocab_size - 256 - len(SPECIALS) merges from a Counter of pre-tokens (plain text).

    Returns a Vocab. Ties between equally frequent pairs go to the larger pair (as strings), so that
    training is deterministic.
    """
    n_merges = vocab_size - 256 - len(SPECIALS)
    words = [list(to_symbols(w)) for w in word_counts]
    counts = list(word_counts.values())
    merges = learn_merges(words, counts, n_merges)
    if len(merges) < n_merges:
        raise ValueError(f"only {len(merges)} merges possible, {n_merges} wanted")
    return Vocab.from_merges(merges)


class Vocab:
    def __init__(self, tokens, types, merges):
        """tokens, types: the token texts and types by id; merges: (a, b) pairs in rank order."""
        self.tokens, self.types = list(tokens), list(types)
        self.merges = [tuple(m) for m in merges]
        self.token_id = {t: i for i, t in enumerate(self.tokens)}
        self.rank = {m: r for r, m in enumerate(self.merges)}
        special = {t: self.token_id[t] for t in SPECIALS}
        self.bos = special["<|begin_of_text|>"]
        self.eos = special["<|end_of_text|>"]
        self.start_header = special["<|start_header_id|>"]
        self.end_header = special["<|end_header_id|>"]
        self.eot = special["<|eot_id|>"]
        self._cache = {}

    @staticmethod
    def from_merges(merges):
        tokens = BYTE_SYMBOL + [a + b for a, b in merges] + SPECIALS
        types = [TYPE_NORMAL] * (len(tokens) - len(SPECIALS)) + [TYPE_CONTROL] * len(SPECIALS)
        return Vocab(tokens, types, merges)

    @staticmethod
    def from_gguf_kv(kv):
        merges = [m.split(" ") for m in kv["tokenizer.ggml.merges"]]
        return Vocab(kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"], merges)

    def merge_strings(self):
        return [f"{a} {b}" for a, b in self.merges]

    def __len__(self):
        return len(self.tokens)

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tokens": self.tokens, "types": self.types, "merges": self.merge_strings()},
                      f, ensure_ascii=False, indent=0)

    @staticmethod
    def load(path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return Vocab(d["tokens"], d["types"], [m.split(" ") for m in d["merges"]])

    def encode(self, text, add_bos=False):
        """Plain text (no special tokens recognised) to ids; <|begin_of_text|> first if add_bos."""
        ids = [self.bos] if add_bos else []
        for piece in pre_tokenize(text):
            ids.extend(self.encode_piece(piece))
        return ids

    def encode_piece(self, piece):
        ids = self._cache.get(piece)
        if ids is None:
            ids = self._bpe(to_symbols(piece))
            self._cache[piece] = ids
        return ids

    def _bpe(self, symbols):
        whole = self.token_id.get(symbols)
        if whole is not None and self.types[whole] == TYPE_NORMAL:
            return [whole]
        syms = list(symbols)
        while len(syms) > 1:
            best_i, best_rank = -1, None
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_i, best_rank = i, r
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        return [self.token_id[s] for s in syms]

    def chat(self, messages, add_generation_prompt=True):
        """Token ids of a conversation as the Llama 3 template renders it: <|begin_of_text|>, then
        per message <|start_header_id|>role<|end_header_id|> "\\n\\n" + content.strip() <|eot_id|>,
        then (add_generation_prompt) the assistant header and "\\n\\n".
        messages: a list of (role, content)."""
        ids = [self.bos]
        for role, content in messages:
            ids += [self.start_header] + self.encode(role) + [self.end_header]
            ids += self.encode("\n\n" + content.strip()) + [self.eot]
        if add_generation_prompt:
            ids += [self.start_header] + self.encode("assistant") + [self.end_header]
            ids += self.encode("\n\n")
        return ids

    def decode(self, ids, show_special=False):
        """Ids to text; control tokens are dropped, or written as their text if show_special."""
        out = bytearray()
        for i in ids:
            if self.types[i] == TYPE_CONTROL:
                if show_special:
                    out.extend(self.tokens[i].encode("utf-8"))
            else:
                out.extend(SYMBOL_BYTE[s] for s in self.tokens[i])
        return out.decode("utf-8", errors="replace")

    def check(self):
        """Consistency of the vocabulary: raises ValueError on the first problem found."""
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("duplicate token texts")
        for r, (a, b) in enumerate(self.merges):
            for part in (a, b, a + b):
                i = self.token_id.get(part)
                if i is None or self.types[i] != TYPE_NORMAL:
                    raise ValueError(f"merge {r} '{a} {b}': {part!r} is not a normal token")
        for b, s in enumerate(BYTE_SYMBOL):
            if self.token_id.get(s) != b:
                raise ValueError(f"byte {b:#04x} is not token {b}")
        for t in SPECIALS:
            if self.types[self.token_id[t]] != TYPE_CONTROL:
                raise ValueError(f"{t} is not a control token")


def training_words(verses, chat_roles=("system", "user", "assistant"), system_prompts=()):
    """The pre-token counts the vocabulary is learned from: each verse followed by a newline (how
    verses follow one another in the training text), the role names and system prompts of the
    chat turns, and each verse after the "\\n\\n" that ends a chat header."""
    counts = collections.Counter()
    for v in verses:
        counts.update(pre_tokenize(v + "\n"))
        counts.update(pre_tokenize("\n\n" + v)[:2])
    for role in chat_roles:
        counts[role] += len(verses) // 2
    for p in system_prompts:
        counts.update({w: len(verses) // (4 * len(system_prompts)) for w in pre_tokenize("\n\n" + p)})
    return counts


def main():
    import argparse

    import corpus
    import chat_data

    ap = argparse.ArgumentParser(description="Learns the byte-level BPE vocabulary from the KJV text.")
    ap.add_argument("--text", required=True, help="output of `bible Gen1:1-Rev22:21`")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", required=True, help="bpe_vocab.json to write")
    args = ap.parse_args()
    verses = corpus.read_verses(args.text)
    vocab = train(training_words(verses, system_prompts=chat_data.SYSTEM_PROMPTS), args.vocab_size)
    vocab.check()
    vocab.save(args.out)
    sample = "In the beginning God created the heaven and the earth.\n"
    print(f"{len(vocab)} tokens ({len(vocab.merges)} merges) written to {args.out}; "
          f"{sample!r} -> {[vocab.tokens[i] for i in vocab.encode(sample)]}")


if __name__ == "__main__":
    main()
