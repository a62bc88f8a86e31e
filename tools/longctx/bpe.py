"""A small pure-Python encoder for the long-context model's byte-level BPE tokenizer.json.

The task generator sizes prompts in tokens on machines without the `tokenizers` package (CI), so
it carries its own encoder for the one tokenizer kind it needs: ASCII text, a Split pre-tokenizer
isolating DIGIT_PATTERN (one digit per token, with the space before it) followed by ByteLevel with
the GPT-2 split, BPE merges, and a
TemplateProcessing post-processor that puts BOS first. Anything else is refused rather than
counted wrong. Words are memoised: filler text repeats a few hundred words.
"""

import json
import re

# The GPT-2 split restricted to ASCII (\p{L} = letters, \p{N} = digits): the generator writes
# ASCII only and encode() refuses anything else.
_SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
# One digit per token, with the space before it: " 301" -> " 3", "0", "1".
DIGIT_PATTERN = r" ?[0-9]"
_DIGIT_SPLIT = re.compile("(" + DIGIT_PATTERN + ")")


def _byte_to_unicode():
    """GPT-2's reversible map from bytes to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(
        range(0xAE, 0xFF + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


class ByteLevelBpe:
    """Encodes ASCII text exactly as the trained tokenizer.json does."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        model = spec["model"]
        if model.get("type") != "BPE":
            raise ValueError(f"{path}: model type {model.get('type')} is not BPE")
        self._check_pre_tokenizer(path, spec.get("pre_tokenizer"))
        self.vocab = model["vocab"]
        self.ranks = {}
        for rank, merge in enumerate(model["merges"]):
            a, b = merge if isinstance(merge, list) else merge.split(" ")
            self.ranks[(a, b)] = rank
        self.bos_id = None
        post = spec.get("post_processor") or {}
        if post.get("type") == "TemplateProcessing":
            first = post["single"][0]
            if "SpecialToken" in first:
                self.bos_id = self.vocab[first["SpecialToken"]["id"]]
        self.eos_id = self.vocab.get("</s>")
        self._bytes = _byte_to_unicode()
        unicode_to_byte = {c: b for b, c in self._bytes.items()}
        self._text = {i: bytes(unicode_to_byte[c] for c in piece).decode("latin-1")
                      for piece, i in self.vocab.items() if all(c in unicode_to_byte for c in piece)}
        self._cache = {}

    @staticmethod
    def _check_pre_tokenizer(path, pre):
        stages = pre["pretokenizers"] if pre and pre.get("type") == "Sequence" else [pre]
        kinds = [(s or {}).get("type") for s in stages]
        split = stages[0] or {}
        if (kinds != ["Split", "ByteLevel"] or split.get("pattern") != {"Regex": DIGIT_PATTERN}
                or split.get("behavior") != "Isolated" or split.get("invert")):
            raise ValueError(f"{path}: pre_tokenizer {kinds} is not Split({DIGIT_PATTERN})+ByteLevel")
        if stages[1].get("add_prefix_space"):
            raise ValueError(f"{path}: ByteLevel add_prefix_space is not supported")

    def _word(self, word):
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        parts = [self._bytes[b] for b in word.encode("ascii")]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                rank = self.ranks.get((parts[i], parts[i + 1]))
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        ids = [self.vocab[p] for p in parts]
        self._cache[word] = ids
        return ids

    def encode(self, text, add_bos=False):
        """Token ids of text (BOS first when add_bos and the tokenizer has one)."""
        if not text.isascii():
            raise ValueError("the long-context encoder handles ASCII text only")
        ids = [self.bos_id] if add_bos and self.bos_id is not None else []
        for piece in _DIGIT_SPLIT.split(text):
            for word in _SPLIT.findall(piece):
                ids.extend(self._word(word))
        return ids

    def token_text(self, token_id):
        """The text of one (non-special) token."""
        return self._text[token_id]

    def count(self, text):
        return len(self.encode(text))
