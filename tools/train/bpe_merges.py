"""Learning BPE merges from counted words: the loop both vocabularies (tokenizer.py and
bpe_tokenizer.py) train with.

Each word is a list of symbols with a count. Every round merges the most frequent adjacent pair in
every word that holds it; ties go to the larger pair (as a tuple of strings), so that training is
deterministic.
"""
import collections


def learn_merges(words, counts, n_merges):
    """words: lists of symbols (rewritten in place as merges apply); counts: each word's count.

    Returns up to n_merges (a, b) pairs in the order learned; fewer when no pair is left to merge.
    """
    pair_count = collections.Counter()
    pair_words = collections.defaultdict(set)  # pair -> indices of the words that hold it
    for wi, syms in enumerate(words):
        for pair in zip(syms, syms[1:]):
            pair_count[pair] += counts[wi]
            pair_words[pair].add(wi)

    merges = []
    while len(merges) < n_merges and pair_count:
        best, best_count = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))
        if best_count <= 0:
            break
        a, b = best
        merged = a + b
        merges.append(best)
        for wi in list(pair_words[best]):
            syms = words[wi]
            for pair in zip(syms, syms[1:]):
                pair_count[pair] -= counts[wi]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[wi] = out
            for pair in zip(out, out[1:]):
                pair_count[pair] += counts[wi]
                pair_words[pair].add(wi)
        del pair_count[best]
        pair_words.pop(best, None)
        for pair in [p for p, c in pair_count.items() if c <= 0]:
            del pair_count[pair]
            pair_words.pop(pair, None)
    return merges
