"""The real-model learning world: SmolLM2-135M-Instruct, coding prompts, a simulated user.

Used by ``bench/learning_smollm2.py`` (and its base-rate probe). Pieces:

* :func:`base_folder` — the cached SmolLM2 Q4_1 GGUF (``packaging/fetch_test_model.py``)
  dequantised once by Transformers (``gguf_file=``) into a plain fp32 folder under
  ``.bench-out/`` that both backends' loaders open.
* :data:`TASKS` — 48 small, realistic coding requests; :func:`split_tasks` puts 32
  in training and 16 disjoint ones in the held-out evaluation.
* :func:`prefers` — the simulated user's hidden preference, one of
  :data:`PREFERENCES` (``--prefer``): chosen so that the base model satisfies it
  sometimes (the bench measures and prints the base rate first). A docstring was
  the first idea, but SmolLM2-135M writes one in only 3% of its answers.
* :func:`degenerate` — empty, looping, or no code when code was asked.
* :func:`generate` — batched sampling with the model's chat template.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TASKS: tuple[str, ...] = (
    "reverses a string",
    "checks whether a number is prime",
    "returns the factorial of n",
    "counts the vowels in a string",
    "returns the largest element of a list",
    "removes duplicates from a list while keeping the order",
    "checks whether a string is a palindrome",
    "computes the n-th Fibonacci number",
    "merges two sorted lists into one sorted list",
    "returns the sum of the digits of an integer",
    "converts a temperature from Celsius to Fahrenheit",
    "counts how often each word appears in a text",
    "flattens a list of lists",
    "returns the second largest number in a list",
    "checks whether two strings are anagrams",
    "computes the greatest common divisor of two numbers",
    "returns the average of a list of numbers",
    "capitalizes the first letter of every word in a sentence",
    "finds the index of an item in a sorted list with binary search",
    "reads a text file and returns its number of lines",
    "returns only the even numbers of a list",
    "converts a binary string to an integer",
    "checks whether a year is a leap year",
    "returns the length of the longest word in a sentence",
    "rotates a list by k positions",
    "counts the number of uppercase letters in a string",
    "returns the intersection of two lists",
    "computes the power of a number without using **",
    "splits a list into chunks of size n",
    "returns the median of a list of numbers",
    "removes all whitespace from a string",
    "converts a list of strings to lowercase",
    "checks whether a list is sorted",
    "returns the product of all numbers in a list",
    "finds the most common element in a list",
    "converts seconds into hours, minutes and seconds",
    "returns the cumulative sum of a list",
    "checks whether a string contains only digits",
    "swaps the keys and values of a dictionary",
    "returns the first n prime numbers",
    "computes the area of a circle from its radius",
    "returns the minimum and maximum of a list as a tuple",
    "counts the number of words in a sentence",
    "removes the None values from a list",
    "returns a list of squares from 1 to n",
    "checks whether a number is a perfect square",
    "sorts a list of dictionaries by a given key",
    "truncates a string to n characters and adds an ellipsis",
)

PHRASINGS: tuple[str, ...] = (
    "Write a Python function that {task}.",
    "Can you give me a Python function that {task}?",
    "I need a small Python function that {task}. Please write it.",
)

#: The "cloud model" of the off-policy ratings: the same base writing under another
#: system prompt at another temperature (its probabilities are not the policy's).
CLOUD_SYSTEM = ("You are a senior Python engineer. Answer with a short explanation and "
                "well-documented code.")


def split_tasks(seed: int = 0) -> tuple[list[int], list[int]]:
    order = list(range(len(TASKS)))
    random.Random(seed).shuffle(order)
    return sorted(order[:32]), sorted(order[32:])


def prompts(tasks: list[int], n: int, rng: random.Random) -> list[str]:
    return [rng.choice(PHRASINGS).format(task=TASKS[rng.choice(tasks)]) for _ in range(n)]


# ---- the simulated user ----------------------------------------------------------------

_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)
_DEF_DOC = re.compile(r"def [^\n]*:\s*\n\s+(\"\"\"|''')", re.S)


def code_of(answer: str) -> str:
    blocks = _CODE.findall(answer)
    if blocks:
        return "\n".join(blocks)
    return answer if "def " in answer else ""


def has_docstring(answer: str) -> bool:
    return bool(_DEF_DOC.search(code_of(answer)))


def has_comment(answer: str) -> bool:
    """The code explains itself: at least one ``#`` comment line in the code."""
    return any(line.strip().startswith("#") for line in code_of(answer).splitlines())


def function_only(answer: str) -> bool:
    """Just the function: code with a ``def`` and no example calls or prints."""
    code = code_of(answer)
    return "def " in code and "print(" not in code


_SIGNATURE = re.compile(r"^\s*def\s+\w+\s*\(([^)]*)\)\s*(->)?", re.M)
_GUARD = re.compile(r"^([ \t]+)if\b[^\n]*:[ \t]*(?:return\b|raise\b|\n\1[ \t]+(?:return|raise)\b)",
                    re.M)
# ``def f(x): return ...`` or a ``return`` line that the next line does not continue
_ONE_RETURN = re.compile(r"^[ \t]*def [^\n]*:(?:[ \t]*return\b|[ \t]*\n([ \t]+)return\b"
                         r"[^\n]*\n(?!\1))", re.M)
_COMPREHENSION = re.compile(r"[\[{(][^\[\]{}()\n]*?\bfor\s+[\w, ()]+\s+in\s+[^\n]*?[\]})]")


def type_hints(answer: str) -> bool:
    """A typed signature: some ``def`` has a parameter annotation or a ``->`` return type."""
    return any(arrow or ":" in params for params, arrow in _SIGNATURE.findall(code_of(answer)))


def guard_clause(answer: str) -> bool:
    """An early exit: an indented ``if ...:`` whose body starts with ``return`` or ``raise``."""
    return bool(_GUARD.search(code_of(answer)))


def comprehension(answer: str) -> bool:
    """A list/set/dict comprehension or generator expression (``[x for x in ...]``)."""
    return bool(_COMPREHENSION.search(code_of(answer)))


def one_liner(answer: str) -> bool:
    """A one-statement function: some ``def`` whose whole body is one ``return`` line."""
    return bool(_ONE_RETURN.search(code_of(answer) + "\n"))


def code_first(answer: str) -> bool:
    """No preamble: the answer opens with its code fence, not with "Here's a function ..."."""
    return answer.lstrip().startswith("```")


def usage_example(answer: str) -> bool:
    """The code shows its use: a ``print(`` or ``assert`` line outside any function body."""
    return any(re.match(r"(print\(|assert\b)", line) for line in code_of(answer).splitlines())


#: Every checkable preference ``--prefer`` can pick. ``comment`` is the one the presets
#: were tuned with. ``usage-example`` and ``code-first`` were fixed for issue 20 from their
#: base rates alone (0.45 and 0.47 of the base's own samples, seed 0), before any run
#: trained on them; ``one-liner`` (0.72), ``type-hints`` (0.02), ``guard`` (0.14) and
#: ``comprehension`` (0.16) were measured with them and left out as too common or too
#: rare (``--probe`` prints every rate; bench/README.md).
PREFERENCES = {"comment": has_comment, "function-only": function_only,
               "docstring": has_docstring, "usage-example": usage_example,
               "code-first": code_first, "one-liner": one_liner, "type-hints": type_hints,
               "guard": guard_clause, "comprehension": comprehension}
PREFER = "comment"


def prefers(answer: str, which: str | None = None) -> bool:
    """The simulated user's hidden preference (default :data:`PREFER`)."""
    return PREFERENCES[which or PREFER](answer)


def looping(answer: str, n: int = 6, share: float = 0.5) -> bool:
    """Half or more of the word n-grams are repeats: the model is stuck in a loop."""
    words = answer.split()
    grams = [tuple(words[i : i + n]) for i in range(max(0, len(words) - n + 1))]
    return len(grams) >= 8 and 1 - len(set(grams)) / len(grams) >= share


def degenerate(answer: str) -> bool:
    """Empty, looping, or no code although code was asked for."""
    return not answer.strip() or looping(answer) or "def " not in code_of(answer)


def rate(answer: str, rng: random.Random, noise: float, which: str | None = None,
         rejects_broken: bool = False) -> int:
    """The simulated user's rating: +1 when the answer has the preference, flipped at ``noise``.

    ``rejects_broken``: a user who also rates a broken answer (``degenerate``: no function
    where one was asked for) bad whatever its style; the noise draw is the same either way,
    so every other answer keeps its rating.
    """
    good = prefers(answer, which) and not (rejects_broken and degenerate(answer))
    if rng.random() < noise:
        good = not good
    return 1 if good else -1


# ---- the model -------------------------------------------------------------------------


def base_folder(out: Path) -> Path:
    """A plain fp32 Transformers folder of SmolLM2-135M-Instruct, built once from the GGUF."""
    folder = out / "smollm2-hf"
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(ROOT / "packaging"))
    from fetch_test_model import FILENAME, cached_model

    gguf = cached_model()
    if gguf is None:
        raise SystemExit(f"needs {FILENAME}: run `python packaging/fetch_test_model.py` first")
    src, name = gguf.parent, gguf.name
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    quant = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    cfg = AutoConfig.from_pretrained(src, gguf_file=name)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quant.state_dict())  # dequantised weights, plain tensors
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    conf = json.loads((tmp / "config.json").read_text())
    rope = (conf.get("rope_parameters") or {}).get("rope_theta")
    if rope and "rope_theta" not in conf:  # mlx-lm reads the top-level key
        conf["rope_theta"] = rope
    (tmp / "config.json").write_text(json.dumps(conf, indent=2))
    tmp.rename(folder)
    return folder


def chat(tok: Any, prompt: str, system: str | None = None) -> str:
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)


def generate(model: Any, tok: Any, prompt_list: list[str], *, max_new: int, temperature: float,
             seed: int, batch: int | None = None, system: str | None = None) -> list[str]:
    """Sampled answers (temperature, no top-k/p), batched with left padding (16 prompts
    at a time on a CPU, 64 on a GPU)."""
    import torch

    batch = batch or (64 if model.device.type == "cuda" else 16)

    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    out: list[str] = []
    model.eval()
    for start in range(0, len(prompt_list), batch):
        chunk = prompt_list[start : start + batch]
        enc = tok([chat(tok, p, system) for p in chunk], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(model.device)
        torch.manual_seed(seed + start)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max_new, do_sample=temperature > 0,
                                 temperature=temperature if temperature > 0 else None,
                                 top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)
        for row in gen[:, enc["input_ids"].shape[1]:]:
            out.append(tok.decode(row, skip_special_tokens=True))
    return out
