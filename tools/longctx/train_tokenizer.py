"""Trains the long-context test model's tokenizer: a byte-level BPE on the project's own text.

Usage: python3 tools/longctx/train_tokenizer.py OUT/tokenizer.json [--vocab 1024]
Needs the `tokenizers` package. The corpus is the filler grammar plus every task's fixed text
(generated with a rough length estimate: only the words matter here). Digits stay one per token
so needles are copied digit by digit, and a space before a digit joins it (" 3" is one token): a
first Digits-style split left a lone space token between "is" and the number, which put the key
of a multi-key needle three tokens before the first digit, and the model did not learn to match
it (multi-key stayed at 20-30% while passkey reached 100%). Checks that
every filler and key word is a single token, which keeps task lengths exact and cheap to count.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from longctx import bpe, filler, tasks  # noqa: E402


class _RoughCount:
    """Stands in for the tokenizer that does not exist yet."""

    @staticmethod
    def count(text):
        return len(text) // 4 + 1


def corpus():
    yield filler.corpus(seed=1, num_chars=4_000_000)
    for i in range(300):
        for task in tasks.TRAINED_TASKS:
            yield tasks.make_task(task, 2048, 10_000 + i, _RoughCount)["prompt"]
    yield " ".join(tasks.KEYS) + " ".join(f" {k}," for k in tasks.KEYS)


def main():
    from tokenizers import (Regex, Tokenizer, decoders, models, pre_tokenizers, processors,
                            trainers)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="path of the tokenizer.json to write")
    parser.add_argument("--vocab", type=int, default=1024, help="vocabulary size")
    args = parser.parse_args()

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(bpe.DIGIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    assert tok.token_to_id("<s>") == 0 and tok.token_to_id("</s>") == 1

    words = [" " + w for w in filler.vocabulary() + tasks.KEYS + tasks.CWE_WORDS]
    split = [w for w in words if len(tok.encode(w, add_special_tokens=False).ids) != 1]
    if split:
        sys.exit(f"these words are not single tokens; raise --vocab: {split}")
    tok.save(args.out)
    print(f"wrote {args.out}: {tok.get_vocab_size()} tokens")


if __name__ == "__main__":
    main()
