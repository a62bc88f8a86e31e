"""Filler text for the long-context tasks: short stories from a small generated grammar.

The project owns every word of it (no downloaded corpus). Properties the tasks rely on:
  * no digits, so a number in a prompt is always a needle;
  * none of the task words (pass key, magic number, VAR, list) appear in it;
  * every sentence starts with a space and ends with punctuation, so the tokens of a text are the
    concatenation of the tokens of its sentences (a byte-level BPE never merges across the
    pre-tokenizer's word boundaries): lengths can be counted sentence by sentence.
Stories keep a cast of characters for several sentences, which gives a trained model something
to continue for thousands of tokens (the long-generation task).
"""

import random

NAMES = [
    "Tom", "Lily", "Ben", "Mia", "Sam", "Anna", "Max", "Lucy", "Jack", "Emma", "Leo", "Zoe",
    "Tim", "Sue", "Bob", "Kim", "Dan", "Amy", "Joe", "Eve",
]
ANIMALS = [
    "dog", "cat", "bird", "fox", "frog", "duck", "bear", "rabbit", "horse", "mouse", "fish",
    "owl", "sheep", "goat", "pig", "cow", "bee", "snail",
]
THINGS = [
    "ball", "kite", "box", "hat", "cake", "book", "toy", "boat", "car", "cup", "drum", "bell",
    "shoe", "coat", "flower", "tree", "stick", "rock", "apple", "pie", "bag", "doll", "train",
    "bike", "bed", "chair", "door", "sock", "spoon", "leaf",
]
ADJECTIVES = [
    "big", "small", "red", "blue", "green", "yellow", "old", "new", "happy", "sad", "soft",
    "shiny", "little", "funny", "pretty", "warm", "cold", "tall", "fast", "slow", "brave",
    "kind", "quiet", "loud",
]
PLACES = [
    "park", "garden", "house", "forest", "lake", "beach", "school", "farm", "shop", "hill",
    "river", "town", "yard", "kitchen", "room", "field",
]
FEELINGS = ["happy", "sad", "scared", "tired", "hungry", "excited", "sleepy", "proud", "angry"]
ACTIONS = [
    "played", "ran", "jumped", "walked", "sang", "danced", "laughed", "looked", "waited", "slept",
]
GIVE_VERBS = ["found", "saw", "wanted", "made", "had", "lost", "liked", "took", "got", "saw"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "bright"]


class StoryWriter:
    """Writes stories sentence by sentence from a seeded random.Random."""

    def __init__(self, rng):
        self.rng = rng
        self._new_story()

    def _new_story(self):
        r = self.rng
        self.hero, self.friend = r.sample(NAMES, 2)
        self.pet = r.choice(ANIMALS)
        self.thing = r.choice(THINGS)
        self.place = r.choice(PLACES)
        self.left = r.randint(6, 14)  # sentences before the next story starts
        self.opening = True

    def sentence(self):
        """One sentence with a leading space (a new story starts on a new line)."""
        if self.left == 0:
            self._new_story()
        self.left -= 1
        r = self.rng
        if self.opening:
            self.opening = False
            start = r.choice([
                f" Once upon a time, there was a {r.choice(ADJECTIVES)} {self.pet} named {self.hero}.",
                f" One day, {self.hero} went to the {self.place}.",
                f" There was a {r.choice(ADJECTIVES)} girl named {self.hero}.",
                f" It was a {r.choice(WEATHER)} day and {self.hero} was {r.choice(FEELINGS)}.",
            ])
            return "\n" + start
        a, b = r.choice(ADJECTIVES), r.choice(ADJECTIVES)
        choices = [
            f" {self.hero} {r.choice(GIVE_VERBS)} a {a} {self.thing}.",
            f" {self.hero} and {self.friend} {r.choice(ACTIONS)} in the {self.place}.",
            f" The {self.pet} was {r.choice(FEELINGS)}.",
            f" {self.friend} said the {self.thing} was very {b}.",
            f" They went to the {r.choice(PLACES)} with the {a} {self.pet}.",
            f" {self.hero} {r.choice(ACTIONS)} with the {self.pet} all day.",
            f" Then {self.friend} saw a {a} {r.choice(ANIMALS)} near the {self.place}.",
            f" The {a} {self.thing} was in the {r.choice(PLACES)}.",
            f" {self.hero} was {r.choice(FEELINGS)} and {self.friend} was {r.choice(FEELINGS)}.",
            f" They {r.choice(ACTIONS)} and {r.choice(ACTIONS)} until it was dark.",
            f" {self.friend} gave {self.hero} a {b} {r.choice(THINGS)}.",
            " They were very happy.",
        ]
        if self.left == 0:
            return r.choice([" The end.", f" {self.hero} went home and slept.",
                             f" {self.hero} and {self.friend} were friends forever."])
        return r.choice(choices)


def vocabulary():
    """Every word the grammar can write (for checks that they are single tokens)."""
    words = set(NAMES + ANIMALS + THINGS + ADJECTIVES + PLACES + FEELINGS + ACTIONS + GIVE_VERBS
                + WEATHER)
    words.update("Once upon a time there was named One day went to the There girl It and "
                 "The said very They with all Then near in were until it dark gave end home "
                 "slept friends forever".split())
    return sorted(words)


def corpus(seed, num_chars):
    """Deterministic filler text of about num_chars characters (tokenizer training)."""
    writer = StoryWriter(random.Random(seed))
    parts, size = [], 0
    while size < num_chars:
        s = writer.sentence()
        parts.append(s)
        size += len(s)
    return "".join(parts)
