"""Training windows for models/kjv-bpe.gguf: plain KJV text mixed with Llama 3 chat conversations.

A plain window is <|begin_of_text|> followed by verses from a verse on, each ended by "\\n" (how
"verse\\nverse\\n..." encodes).

A chat window is a conversation over consecutive verses, token for token as the Llama 3 chat
template renders it (special tokens as their ids, never as text):

    <|begin_of_text|>
    [<|start_header_id|>system<|end_header_id|>"\\n\\n" + prompt<|eot_id|>]      (sometimes)
    <|start_header_id|>user<|end_header_id|>"\\n\\n" + verse k<|eot_id|>
    <|start_header_id|>assistant<|end_header_id|>"\\n\\n" + verse k+1 [+ " " + verse k+2]<|eot_id|>
    <|start_header_id|>user<|end_header_id|>"\\n\\n" + the verse after that<|eot_id|>
    ...

so the model learns to answer a verse with the verse(s) that follow it and to end its turn with
<|eot_id|>. Windows are cut at the training length; the loss covers every token.
"""
import numpy as np

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "Answer with a verse of the King James Bible.",
    "Reply in the words of the King James Bible.",
    "You are a preacher.",
    "Continue the scripture.",
    "Be brief.",
]


class Windows:
    """Windows of `length` tokens over a list of verses; a window starts at a verse."""

    def __init__(self, vocab, verses, length, system_share=0.3, two_verse_share=0.2):
        self.vocab, self.verses, self.length = vocab, verses, length
        self.system_share, self.two_verse_share = system_share, two_verse_share
        self.plain = [np.array(vocab.encode(v + "\n"), dtype=np.int64) for v in verses]
        self.starts = np.cumsum([0] + [len(p) for p in self.plain])
        self.stream = np.concatenate(self.plain)
        # Verses from which a whole plain window fits before the end of the stream; a chat window
        # (longer for the same verses: headers) fits then too.
        self.usable = [k for k in range(len(verses))
                       if self.starts[-1] - self.starts[k] >= length]
        self.header = {role: [vocab.start_header] + vocab.encode(role) + [vocab.end_header]
                       for role in ("system", "user", "assistant")}

    def plain_window(self, k):
        s = self.starts[k]
        return np.concatenate(([self.vocab.bos], self.stream[s: s + self.length - 1]))

    def turn(self, role, content):
        return self.header[role] + self.vocab.encode("\n\n" + content.strip()) + [self.vocab.eot]

    def chat_window(self, k, rng):
        ids = [self.vocab.bos]
        if rng.random() < self.system_share:
            ids += self.turn("system", SYSTEM_PROMPTS[rng.integers(len(SYSTEM_PROMPTS))])
        role = "user"
        while len(ids) < self.length and k < len(self.verses):
            n = 2 if role == "assistant" and rng.random() < self.two_verse_share else 1
            ids += self.turn(role, " ".join(self.verses[k:k + n]))
            k += n
            role = "assistant" if role == "user" else "user"
        ids = ids[: self.length]
        if len(ids) < self.length:  # the end of the text: fill with plain verses
            ids += list(self.stream[: self.length - len(ids)])
        return np.array(ids, dtype=np.int64)

    def window(self, k, chat, rng):
        return self.chat_window(k, rng) if chat else self.plain_window(k)
