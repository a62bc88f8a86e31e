"""RULER-style long-context tasks with answers known by construction (RULER, Hsieh et al. 2024,
sections 3.1-3.3): needles in filler text, variable tracking, common-word extraction, and a
long-generation prompt.

A task is a dict:
  task, length        the task name and the target prompt length in tokens (BOS included);
  tokens              the prompt's actual length (<= length: filler is whole sentences);
  prompt              the text to feed (the tokenizer adds BOS);
  target              what a perfect model writes next (training appends it, then EOS);
  answers             the strings scored: a prompt scores the fraction found in the output;
  max_new_tokens      how much to generate when evaluating.
Everything is a pure function of (task, length, seed): the same arguments give the same bytes.
"""

import random

from longctx import filler

TASKS = ("passkey", "multikey", "multivalue", "vartrack", "cwe", "longgen")
TRAINED_TASKS = TASKS[:5]  # longgen needs no extra data: filler is its training text

KEYS = [
    "amber", "basil", "cedar", "coral", "denim", "ember", "fern", "garnet", "hazel", "indigo",
    "ivory", "jade", "jasper", "lemon", "lilac", "linen", "maple", "marble", "mint", "olive",
    "onyx", "opal", "pearl", "pepper", "plum", "quartz", "ruby", "sage", "salt", "silver", "slate",
    "topaz", "velvet", "violet", "walnut", "zinc", "cobalt", "copper", "bronze", "crimson",
    "cotton", "pine", "birch", "clay", "frost", "honey", "iron", "lotus", "nutmeg", "orchid",
]
CWE_WORDS = sorted(set(filler.ANIMALS + filler.THINGS + filler.PLACES))
NEEDLES = {"multikey": 4, "multivalue": 4}
CHAIN = 4  # variables per chain in vartrack
CWE_COMMON = 3
CWE_COMMON_SHARE = 0.08  # each common word's share of the list; the others share the rest


def _number(rng):
    return str(rng.randint(100000, 999999))


def _fill(bpe, rng, name, length, fixed, inserts):
    """Filler sentences worth at most the `length - fixed` tokens a prompt has left after its
    `fixed` tokens, with each insert text at its depth. ValueError when fixed > length.

    inserts: list of (depth in [0, 1], text). Returns (text, tokens used)."""
    if fixed > length:
        raise ValueError(f"{name}: {length} tokens cannot hold its {fixed} fixed tokens")
    budget = length - fixed
    writer = filler.StoryWriter(rng)
    sentences, used = [], 0
    while True:
        s = writer.sentence()
        n = bpe.count(s)
        if used + n > budget:
            break
        sentences.append(s)
        used += n
    for depth, text in sorted(inserts, key=lambda x: x[0], reverse=True):
        sentences.insert(round(depth * len(sentences)), text)
    return "".join(sentences), used


def _needle_task(kind, bpe, rng, length):
    if kind == "passkey":
        value = _number(rng)
        intro = " There is a pass key hidden in the text below. Find it and remember it."
        needles = [f" The pass key is {value}. Remember it. {value} is the pass key."]
        question = " What is the pass key? The pass key is"
        answers = [value]
    else:
        count = NEEDLES[kind]
        if kind == "multikey":
            keys = rng.sample(KEYS, count)
            values = [_number(rng) for _ in keys]
            pick = rng.randrange(count)
            key = keys[pick]
            answers = [values[pick]]
            question = _multikey_question(key)
            intro = MULTIKEY_INTRO
            needles = [_multikey_needle(k, v) for k, v in zip(keys, values)]
        else:
            key = rng.choice(KEYS)
            keys = [key] * count
            values = [_number(rng) for _ in keys]
            answers = values
            question = (f" What are all the special magic numbers for {key}? "
                        f"The special magic numbers for {key} are")
            intro = " Some special magic numbers are hidden in the text below. Remember them."
            needles = [f" The special magic number for {k} is {v}." for k, v in zip(keys, values)]
    depths = sorted(rng.random() for _ in needles)  # answers listed in order of appearance
    target = " " + ", ".join(answers) + "."
    return intro, list(zip(depths, needles)), question, answers, target


# Multi-key wording: each key appears once in its needle, right before its number, and once in
# the question, as its last token. Finding the number is then one match of the asked key against
# the needles' keys; with RULER's wording ("The special magic number for KEY is N", asked as
# "... for KEY is") the key sits two tokens before the number, and the 5M-parameter test model
# never learned that match in its ten minutes (it stayed at chance in every run,
# bench/RESULTS.md, issue 11's training runs), while it copies numbers found this way perfectly.
MULTIKEY_INTRO = (" Some special magic numbers are hidden in the text below, each right after its"
                  " key. Remember them.")


def _multikey_needle(key, value):
    return f" One special magic number: {key} {value}."


def _multikey_question(key):
    return f" What is the special magic number for this key? {key}"


def multikey_drill(length, seed, bpe, needles):
    """Training-only multi-key drill: `needles` multi-key needles in filler, then the multi-key
    question about every key in a random order, each followed by its answer (the multi-query
    associative recall of Arora et al. 2023, "Zoology", section 3). Every answer supervises key
    matching, where an evaluation prompt has one answer: with the wording above and 40% of the
    training mix the test model learns it; at 25%, or with RULER's wording, it did not
    (bench/RESULTS.md, issue 11's training runs).

    Returns {"prompt": text, "qa": [(question, answer text), ...]}; deterministic in the arguments
    and disjoint from make_task's instances (its own RNG stream)."""
    rng = random.Random(f"multikey-drill/{length}/{seed}/{needles}")
    keys = rng.sample(KEYS, needles)
    values = [_number(rng) for _ in keys]
    intro = MULTIKEY_INTRO
    texts = [_multikey_needle(k, v) for k, v in zip(keys, values)]
    order = list(range(needles))
    rng.shuffle(order)
    qa = [(_multikey_question(keys[i]), f" {values[i]}.") for i in order]
    fixed = 1 + bpe.count(intro) + sum(bpe.count(t) for t in texts)
    fixed += sum(bpe.count(q) + bpe.count(a) for q, a in qa)
    body, _ = _fill(bpe, rng, "multikey drill", length, fixed, [(rng.random(), t) for t in texts])
    return {"prompt": intro + body, "qa": qa}


def _vartrack(bpe, rng, length):
    value, other = _number(rng), _number(rng)
    names = []  # a list, not a set: a set's order of strings changes with each process's hash seed
    while len(names) < 2 * CHAIN:
        name = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
        if name not in names:
            names.append(name)
    chain, decoy = names[:CHAIN], names[CHAIN:]
    inserts = []
    for vars_, val in ((chain, value), (decoy, other)):
        depths = sorted(rng.random() for _ in vars_)
        lines = [f" VAR {vars_[0]} = {val}."]
        lines += [f" VAR {vars_[i]} = VAR {vars_[i - 1]}." for i in range(1, len(vars_))]
        inserts += list(zip(depths, lines))
    intro = " Memorize the variable assignments in the text below."
    question = (f" Find all variables that are assigned the value {value}. "
                "Answer: the variables are")
    return intro, inserts, question, chain, " " + ", ".join(chain) + "."


def _cwe(bpe, rng, length, intro, question):
    common = rng.sample(CWE_WORDS, CWE_COMMON)
    rare = [w for w in CWE_WORDS if w not in common]
    budget = length - 1 - bpe.count(intro) - bpe.count(question) - 1
    per_word = bpe.count(" ball,")  # every list word is one token, then a comma
    n = max(budget // per_word, 4 * CWE_COMMON)
    each = max(2, round(n * CWE_COMMON_SHARE))
    words = [w for w in common for _ in range(each)]
    words += [rng.choice(rare) for _ in range(n - len(words))]
    rng.shuffle(words)
    # Rare words must stay rare: cap each at half the common count (redraw the excess).
    counts = {}
    for i, w in enumerate(words):
        counts[w] = counts.get(w, 0) + 1
        if w in rare and counts[w] > each // 2:
            counts[w] -= 1
            w = min(rare, key=lambda r: counts.get(r, 0))
            counts[w] = counts.get(w, 0) + 1
            words[i] = w
    body = "".join(f" {w}," for w in words)
    answers = sorted(common)
    return body, answers, " " + ", ".join(answers) + "."


def make_task(task, length, seed, bpe, gen_tokens=4096):
    """One task instance; deterministic in (task, length, seed)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    rng = random.Random(f"{task}/{length}/{seed}")
    max_new = 16
    if task == "longgen":
        intro, inserts, question, answers, target = " Here are some stories.", [], "", [], ""
        max_new = gen_tokens
    elif task == "vartrack":
        intro, inserts, question, answers, target = _vartrack(bpe, rng, length)
        max_new = 48
    elif task == "cwe":
        intro = " Below is a list of words. Memorize the most common ones."
        question = (" What are the three most common words in the list above? "
                    "Answer: the three most common words are")
        body, answers, target = _cwe(bpe, rng, length, intro, question)
        prompt = intro + body + question
        return _result(task, length, bpe, prompt, target, answers, 24)
    else:
        intro, inserts, question, answers, target = _needle_task(task, bpe, rng, length)
        max_new = 48 if task == "multivalue" else 16
    fixed = 1 + bpe.count(intro) + bpe.count(question) + sum(bpe.count(t) for _, t in inserts)
    body, _ = _fill(bpe, rng, task, length, fixed, inserts)
    return _result(task, length, bpe, intro + body + question, target, answers, max_new)


def _result(task, length, bpe, prompt, target, answers, max_new):
    tokens = 1 + bpe.count(prompt)
    if tokens > length:
        raise AssertionError(f"{task}: prompt of {tokens} tokens exceeds {length}")
    return {"task": task, "length": length, "tokens": tokens, "prompt": prompt,
            "target": target, "answers": answers, "max_new_tokens": max_new}


def score(task, output):
    """RULER's string-match score: the fraction of answers found in the output (None when the
    task has no answers)."""
    if not task["answers"]:
        return None
    return sum(a in output for a in task["answers"]) / len(task["answers"])
