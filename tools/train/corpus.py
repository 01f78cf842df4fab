"""The training text: the King James Bible as printed by Debian's `bible` (package bible-kjv).

`bible Gen1:1-Rev22:21` prints chapter headings ("Genesis 1"), then verses as "  N text" wrapped
at 80 columns. We keep only the verse text, one verse per line: no book names, chapter or verse
numbers, so that the model learns prose and nothing else.
"""
import re

_VERSE_START = re.compile(r"^\s+(\d+) (.*)$")


def read_verses(path):
    """Returns the list of verses (str, one line each, words separated by single spaces)."""
    verses = []
    after_blank = False  # a chapter heading: a non-verse line after a blank line
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                after_blank = True
                continue
            m = _VERSE_START.match(line)
            is_heading, after_blank = after_blank and not m, False
            if is_heading:
                continue
            if m:
                verses.append(m.group(2))
            elif verses:
                verses[-1] += " " + line
    return [" ".join(v.split()) for v in verses]
