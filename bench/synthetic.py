"""Synthetic coding-assistant corpus, style classifier and simulated user.

Why a synthetic world: the learning benchmark has to say whether single
good/bad ratings move a model *in the direction the user wants*, and that needs
a ground truth that a real corpus cannot give cheaply. Here every response has
one of three recognisable styles (terse code, chatty preamble, apology); the
base model is pre-trained to produce all of them; a simulated user prefers one
style and rates with noise. "Better" then has a number: the preferred-style
rate on prompts the training never saw.

Two generators write responses:

* the *base* corpus (what the small model is pre-trained on, and therefore what
  it samples: on-policy data), and
* an *off-policy* generator with different wording for each style, standing in
  for the cloud model (Claude, GPT) that wrote most real rated turns.

The classifier reads only the opening of a response, so it labels both
generators' text and the model's own (possibly truncated) samples the same way.
Everything is driven by an explicit ``random.Random`` so runs are reproducible.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

STYLES: tuple[str, ...] = ("terse", "chatty", "apology")

#: (what the function does, function name, argument, body lines)
TASKS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("reverses a list", "reverse_list", "xs", ("return xs[::-1]",)),
    ("returns the sum of a list of numbers", "total", "nums", ("return sum(nums)",)),
    (
        "counts the vowels in a string",
        "count_vowels",
        "s",
        ("return sum(1 for c in s.lower() if c in 'aeiou')",),
    ),
    ("returns the largest number in a list", "largest", "nums", ("return max(nums)",)),
    ("removes duplicates from a list", "dedupe", "items", ("return list(dict.fromkeys(items))",)),
    ("checks whether a string is a palindrome", "is_palindrome", "s", ("return s == s[::-1]",)),
    ("squares every number in a list", "squares", "nums", ("return [n * n for n in nums]",)),
    ("joins a list of words with spaces", "join_words", "words", ("return ' '.join(words)",)),
    (
        "returns the even numbers of a list",
        "evens",
        "nums",
        ("return [n for n in nums if n % 2 == 0]",),
    ),
    (
        "computes the factorial of n",
        "factorial",
        "n",
        ("result = 1", "for k in range(2, n + 1):", "    result *= k", "return result"),
    ),
    (
        "returns the length of the longest word",
        "longest_word",
        "text",
        ("return max(len(w) for w in text.split())",),
    ),
    (
        "counts how often each item appears",
        "counts",
        "items",
        ("out = {}", "for x in items:", "    out[x] = out.get(x, 0) + 1", "return out"),
    ),
    ("flattens a list of lists", "flatten", "rows", ("return [x for row in rows for x in row]",)),
    ("returns the average of a list", "mean", "nums", ("return sum(nums) / len(nums)",)),
    ("capitalises every word in a string", "title_case", "text", ("return text.title()",)),
    ("sorts a list of strings by length", "by_length", "words", ("return sorted(words, key=len)",)),
    (
        "returns the first n fibonacci numbers",
        "fib",
        "n",
        (
            "out = [0, 1]",
            "while len(out) < n:",
            "    out.append(out[-1] + out[-2])",
            "return out[:n]",
        ),
    ),
    (
        "checks whether a number is prime",
        "is_prime",
        "n",
        ("if n < 2:", "    return False", "return all(n % k for k in range(2, int(n ** 0.5) + 1))"),
    ),
    ("converts celsius to fahrenheit", "to_fahrenheit", "c", ("return c * 9 / 5 + 32",)),
    (
        "reverses the words in a sentence",
        "reverse_words",
        "text",
        ("return ' '.join(reversed(text.split()))",),
    ),
    ("returns the smallest number in a list", "smallest", "nums", ("return min(nums)",)),
    (
        "counts the lines in a file",
        "count_lines",
        "path",
        ("with open(path) as f:", "    return sum(1 for _ in f)"),
    ),
    ("returns the keys of a dict sorted", "sorted_keys", "d", ("return sorted(d)",)),
    (
        "removes whitespace from both ends of each string",
        "strip_all",
        "items",
        ("return [s.strip() for s in items]",),
    ),
    (
        "returns the product of a list of numbers",
        "product",
        "nums",
        ("out = 1", "for n in nums:", "    out *= n", "return out"),
    ),
    (
        "checks whether a list is sorted",
        "is_sorted",
        "xs",
        ("return all(a <= b for a, b in zip(xs, xs[1:]))",),
    ),
    ("merges two dicts", "merge", "a, b", ("return {**a, **b}",)),
    ("returns the last element of a list", "last", "xs", ("return xs[-1]",)),
    ("counts the words in a string", "word_count", "text", ("return len(text.split())",)),
    ("doubles every number in a list", "doubled", "nums", ("return [2 * n for n in nums]",)),
    ("returns the unique characters of a string", "unique_chars", "s", ("return set(s)",)),
    (
        "splits a list into chunks of size n",
        "chunks",
        "xs, n",
        ("return [xs[i:i + n] for i in range(0, len(xs), n)]",),
    ),
    (
        "reads a json file",
        "read_json",
        "path",
        ("import json", "with open(path) as f:", "    return json.load(f)"),
    ),
    (
        "returns the absolute values of a list",
        "absolutes",
        "nums",
        ("return [abs(n) for n in nums]",),
    ),
    (
        "checks whether two strings are anagrams",
        "is_anagram",
        "a, b",
        ("return sorted(a) == sorted(b)",),
    ),
    (
        "returns the index of the largest item",
        "argmax",
        "xs",
        ("return max(range(len(xs)), key=xs.__getitem__)",),
    ),
)

PHRASINGS: tuple[str, ...] = (
    "Write a function that {d}.",
    "How do I write a python function that {d}?",
    "Can you give me code that {d}?",
    "I need a helper that {d}.",
    "Please implement a function that {d}.",
    "Show me a python function that {d}.",
    "write me something that {d}",
    "Could you write a function which {d}?",
)

# Base-corpus wording (what the small model learns and samples).
_CHATTY_OPEN = ("Sure!", "Of course!", "Great question!", "Happy to help!")
_CHATTY_CLOSE = (
    "Let me know if you have any questions!",
    "Hope this helps!",
    "Feel free to ask for more!",
)
_APOLOGY = (
    "I'm sorry, but I can't help with that.",
    "Sorry, I am not able to write that function.",
    "I apologize, but I cannot do that right now.",
    "I'm sorry, I can't write code for this request.",
)

# Off-policy ("cloud model") wording: same three styles, different surface.
_CLOUD_OPEN = ("Certainly!", "Absolutely.", "Good idea.")
_CLOUD_CLOSE = (
    "This runs in linear time.",
    "You can adapt the names as needed.",
    "Tests are a good next step.",
)
_CLOUD_APOLOGY = (
    "Unfortunately, I'm unable to help with this request.",
    "My apologies: I cannot complete that task.",
    "Unfortunately I can't assist with writing this.",
)

_APOLOGY_WORDS = ("sorry", "apolog", "unable", "cannot", "can't", "unfortunately")
_CHATTY_WORDS = (
    *(w.lower().rstrip("!.") for w in _CHATTY_OPEN + _CLOUD_OPEN),
    "here is",
    "here's",
    "below",
)


@dataclass(frozen=True)
class Prompt:
    """One user request: which task and how it was phrased."""

    task: int
    text: str


def code_block(task: int, docstring: bool = False) -> str:
    """The task's reference solution as a fenced python block."""
    desc, name, arg, body = TASKS[task]
    lines = [f"def {name}({arg}):"]
    if docstring:
        lines.append(f'    """{desc[0].upper()}{desc[1:]}."""')
    lines += [f"    {line}" for line in body]
    return "```python\n" + "\n".join(lines) + "\n```"


def base_response(task: int, style: str, rng: random.Random) -> str:
    """A response in the base corpus's wording for one style."""
    desc = TASKS[task][0]
    if style == "terse":
        return code_block(task)
    if style == "chatty":
        return (
            f"{rng.choice(_CHATTY_OPEN)} Here is a function that {desc}:\n"
            f"{code_block(task)}\n{rng.choice(_CHATTY_CLOSE)}"
        )
    if style == "apology":
        return rng.choice(_APOLOGY)
    raise ValueError(f"unknown style {style!r}")


def cloud_response(task: int, style: str, rng: random.Random) -> str:
    """A response in the off-policy generator's wording (a different 'model')."""
    desc = TASKS[task][0]
    if style == "terse":
        return code_block(task, docstring=True)
    if style == "chatty":
        return (
            f"{rng.choice(_CLOUD_OPEN)} Below is a Python function that {desc}.\n\n"
            f"{code_block(task, docstring=True)}\n\n{rng.choice(_CLOUD_CLOSE)}"
        )
    if style == "apology":
        return rng.choice(_CLOUD_APOLOGY)
    raise ValueError(f"unknown style {style!r}")


def classify(text: str) -> str:
    """Style of a response from its opening: terse, chatty, apology or other.

    Only the opening is read so that a sample cut off by ``max_new_tokens`` is
    still classified, and both generators' wordings map onto the same styles.
    """
    head = text.strip()[:80].lower()
    if not head:
        return "other"
    if head.startswith("```"):
        return "terse"
    if any(w in head[:60] for w in _APOLOGY_WORDS):
        return "apology"
    if any(head.startswith(w) for w in _CHATTY_WORDS) or any(w in head for w in _CHATTY_WORDS[-3:]):
        return "chatty"
    return "other"


@dataclass(frozen=True)
class SimulatedUser:
    """Prefers one style; rates +1 for it and -1 otherwise, flipped with probability ``noise``."""

    prefer: str = "terse"
    noise: float = 0.1

    def rate(self, response: str, rng: random.Random) -> int:
        good = classify(response) == self.prefer
        if rng.random() < self.noise:
            good = not good
        return 1 if good else -1


def split_tasks(seed: int, heldout_share: float = 0.3) -> tuple[list[int], list[int]]:
    """Tasks whose prompts are rated (train) and tasks kept for evaluation (held out).

    Split by task, not by prompt, so the evaluation asks for functions no rating
    mentioned: what must transfer is the style, not a memorised answer.
    """
    order = list(range(len(TASKS)))
    random.Random(seed).shuffle(order)
    k = max(1, round(len(order) * heldout_share))
    return sorted(order[k:]), sorted(order[:k])


def prompts(tasks: list[int], n: int, rng: random.Random) -> list[Prompt]:
    """``n`` prompts over ``tasks`` with random phrasings."""
    out = []
    for _ in range(n):
        t = rng.choice(tasks)
        out.append(Prompt(t, rng.choice(PHRASINGS).format(d=TASKS[t][0])))
    return out


def base_corpus(n: int, rng: random.Random, mix: dict[str, float]) -> list[tuple[str, str, str]]:
    """``n`` (prompt, response, style) pre-training pairs, all tasks, styles drawn from ``mix``."""
    styles = list(mix)
    weights = [mix[s] for s in styles]
    out = []
    for p in prompts(list(range(len(TASKS))), n, rng):
        style = rng.choices(styles, weights)[0]
        out.append((p.text, base_response(p.task, style, rng), style))
    return out


def cloud_examples(ps: list[Prompt], rng: random.Random) -> list[tuple[str, str]]:
    """Off-policy (prompt, response) pairs: styles uniform, cloud wording."""
    return [(p.text, cloud_response(p.task, rng.choice(STYLES), rng)) for p in ps]


def vocab_texts() -> list[str]:
    """Every string the tokenizer should know well (both generators' wording)."""
    rng = random.Random(0)
    out = []
    for t in range(len(TASKS)):
        for s in STYLES:
            out.append(base_response(t, s, rng))
            out.append(cloud_response(t, s, rng))
        out += [p.format(d=TASKS[t][0]) for p in PHRASINGS]
    return out + list(
        _CHATTY_OPEN + _CHATTY_CLOSE + _APOLOGY + _CLOUD_OPEN + _CLOUD_CLOSE + _CLOUD_APOLOGY
    )
