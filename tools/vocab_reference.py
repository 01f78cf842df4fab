#!/usr/bin/env python3
"""Reference tokenizer for the known-id tests of tests/model/tokenizer_vocab_test.cpp.

It generated the expected ids written into that test. It is written from the definitions, independently
of the C++ code, and is slow on purpose (no caches, no heaps):

  * byte-level BPE ("gpt2"): split the text by the pre-tokenizer's regular expression (each match and each
    run between matches is a word), spell each byte with the GPT-2 byte-to-unicode table, then repeatedly
    merge every occurrence of the adjacent pair with the lowest merge rank, left to right;
  * SentencePiece ("llama"): spaces become U+2581, one is prefixed, and the adjacent pair whose
    concatenation is a piece with the highest score is merged (leftmost among equals); characters that are
    not pieces become their <0xXX> byte tokens;
  * parse_special: the literal text of control and user-defined tokens, longest first, is that token.

Usage: python3 tools/vocab_reference.py ../shared/vocab   (Debian's python3 with python3-regex)
"""
import struct
import sys

import regex

# Pre-tokenizer expressions by tokenizer.ggml.pre (only the single-expression ones are needed here).
PRE_PATTERNS = {
    "gpt-2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


def read_gguf_kv(path):
    buf = open(path, "rb").read()
    pos = 4

    def take(n):
        nonlocal pos
        b = buf[pos:pos + n]
        pos += n
        return b

    def string():
        (n,) = struct.unpack("<Q", take(8))
        return take(n).decode("utf-8")

    formats = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
               12: "<d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, count = struct.unpack("<IQ", take(12))
            return [value(et) for _ in range(count)]
        return struct.unpack(formats[t], take(struct.calcsize(formats[t])))[0]

    _, _, n_kv = struct.unpack("<IQQ", take(20))
    kv = {}
    for _ in range(n_kv):
        key = string()
        (t,) = struct.unpack("<I", take(4))
        kv[key] = value(t)
    return kv


def byte_to_unicode():
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def split_specials(text, specials, parse_special):
    """[(is_special, text_or_id)] in order."""
    if not parse_special:
        return [(False, text)]
    out, run, i = [], "", 0
    ordered = sorted(specials.items(), key=lambda kv: -len(kv[0]))
    while i < len(text):
        for s, tid in ordered:
            if text.startswith(s, i):
                if run:
                    out.append((False, run))
                    run = ""
                out.append((True, tid))
                i += len(s)
                break
        else:
            run += text[i]
            i += 1
    if run:
        out.append((False, run))
    return out


class Bpe:
    def __init__(self, kv):
        self.tokens = kv["tokenizer.ggml.tokens"]
        self.types = kv["tokenizer.ggml.token_type"]
        self.ids = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty in (0, 1):
                self.ids.setdefault(t, i)
        self.ranks = {}
        for r, m in enumerate(kv["tokenizer.ggml.merges"]):
            a, b = m.split(" ")
            self.ranks.setdefault((a, b), r)
        self.specials = {t: i for i, (t, ty) in enumerate(zip(self.tokens, self.types)) if ty in (3, 4)}
        self.pattern = regex.compile(PRE_PATTERNS[kv["tokenizer.ggml.pre"]])
        self.b2u = byte_to_unicode()

    def words(self, text):
        out, last = [], 0
        for m in self.pattern.finditer(text):
            if m.start() > last:
                out.append(text[last:m.start()])
            out.append(m.group())
            last = m.end()
        if last < len(text):
            out.append(text[last:])
        return out

    def merge(self, word):
        syms = [self.b2u[b] for b in word.encode("utf-8")]
        while len(syms) > 1:
            pairs = [(self.ranks.get((syms[i], syms[i + 1])), i) for i in range(len(syms) - 1)]
            pairs = [p for p in pairs if p[0] is not None]
            if not pairs:
                break
            best = min(pairs)[0]
            a, b = syms[[i for r, i in pairs if r == best][0]], syms[[i for r, i in pairs if r == best][0] + 1]
            merged, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(syms[i])
                    i += 1
            syms = merged
        return [self.ids[s] for s in syms]

    def encode(self, text, parse_special=False):
        out = []
        for special, part in split_specials(text, self.specials, parse_special):
            if special:
                out.append(part)
            else:
                for w in self.words(part):
                    out += self.merge(w)
        return out


class Spm:
    def __init__(self, kv):
        self.tokens = kv["tokenizer.ggml.tokens"]
        self.scores = kv["tokenizer.ggml.scores"]
        self.types = kv["tokenizer.ggml.token_type"]
        self.pieces = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty in (0, 1, 4):
                self.pieces.setdefault(t, i)
        self.bytes = {t: i for i, (t, ty) in enumerate(zip(self.tokens, self.types)) if ty == 6}
        self.specials = {t: i for i, (t, ty) in enumerate(zip(self.tokens, self.types)) if ty in (3, 4)}
        self.bos = kv["tokenizer.ggml.bos_token_id"]

    def merge(self, text):
        syms = list(text)
        while True:
            best = None
            for i in range(len(syms) - 1):
                pid = self.pieces.get(syms[i] + syms[i + 1])
                if pid is not None and (best is None or self.scores[pid] > best[0]):
                    best = (self.scores[pid], i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        out = []
        for s in syms:
            if s in self.pieces:
                out.append(self.pieces[s])
            else:
                out += [self.bytes["<0x%02X>" % b] for b in s.encode("utf-8")]
        return out

    def encode(self, text, parse_special=False):
        out = [self.bos]
        for special, part in split_specials(text, self.specials, parse_special):
            if special:
                out.append(part)
            else:
                # The space prefix starts every run of text, the first and each after a special token.
                out += self.merge("\u2581" + part.replace(" ", "\u2581"))
        return out


CASES = {
    "gpt-2": [("Hello world", False), (" Hello", False), ("hello  world\n\n", False), ("3333333", False),
              ("I'm", False), ("\u4f60\u597d\u4e16\u754c", False), ("\U0001F999", False),
              ("<|endoftext|>user", False), ("<|endoftext|>user", True), ("  leading\tand trailing  ", False),
              ("don't STOP'LL 12,345.67!", False)],
    "qwen2": [("Hello world", False), (" Hello", False), ("hello  world\n\n", False), ("3333333", False),
              ("I'm", False), ("\u4f60\u597d\u4e16\u754c", False), ("\U0001F999", False),
              ("<|im_start|>user", False), ("<|im_start|>user\nHi<|im_end|>", True),
              ("  leading\tand trailing  ", False), ("don't STOP'LL 12,345.67!", False)],
    "phi-3": [("Hello world", False), ("hello  world\n\n", False), ("3333333", False), ("I'm", False),
              ("\u4f60\u597d\u4e16\u754c", False), ("\U0001F999", False), ("<|user|>", True),
              ("Hi<|end|>", True), ("<|assistant|>", True), ("<|user|>", False),
              ("<|user|>\nHi<|end|>\n<|assistant|>", True)],
}


def cpp_literal(text):
    """A C++ string literal of the UTF-8 bytes of `text`."""
    out, hex_escape = "", False
    for b in text.encode("utf-8"):
        c = chr(b)
        if hex_escape and c in "0123456789abcdefABCDEF":
            out += '" "'  # end the \x escape before a hex digit
        hex_escape = False
        if c in '"\\':
            out += "\\" + c
        elif c == "\n":
            out += "\\n"
        elif c == "\t":
            out += "\\t"
        elif 0x20 <= b < 0x7F:
            out += c
        else:
            out += "\\x%02x" % b
            hex_escape = True
    return '"' + out + '"'


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "../shared/vocab"
    for name, cases in CASES.items():
        kv = read_gguf_kv(f"{folder}/ggml-vocab-{name}.gguf")
        tok = Spm(kv) if kv["tokenizer.ggml.model"] == "llama" else Bpe(kv)
        print(f"// {name}")
        for text, special in cases:
            ids = tok.encode(text, special)
            print(f"    {{{cpp_literal(text)}, {str(special).lower()}, {{{', '.join(map(str, ids))}}}}},")


if __name__ == "__main__":
    main()
