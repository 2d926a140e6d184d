"""Long, unique reasoning for ``serve-llm --policy reasoning``, as a real model writes when
told to think step by step.

A canned sentence would make every answer the same few tokens: cheap to decode, and the
extraction prompts that quote it would share their prefix in the engine's cache, which real
answers never do. :func:`reasoning_text` writes ``tokens`` stand-in tokens (as the engine
counts them, :func:`~populace.llm.offline._engine.text_tokens`) of level-k reasoning whose numbers
are drawn from the seed, so that two agents' answers part within their first sentence.
"""

from __future__ import annotations

from collections.abc import Callable

from populace.core import derive_seed, mix64

from ._engine import text_tokens

_STEP = 0x7E5  # salt of the draws, apart from the server's own

# Each takes a draw (a function of a range giving a seeded integer in it) and the bounds.
_Writer = Callable[[Callable[[int, int], int], int, int], str]

_OPENERS: tuple[_Writer, ...] = (
    lambda d, lo, hi: f"Around {d(lo + (hi - lo) // 4, hi - 5)} is where I start, as "
                      f"{d(20, 80)} percent of a crowd picking at random between {lo} and "
                      f"{hi} would average near {d(lo + (hi - lo) // 3, hi)}.",
    lambda d, lo, hi: f"{d(20, 80)} percent of the players, I think, do not look ahead and "
                      f"write something like {d(lo + (hi - lo) // 4, hi)}.",
    lambda d, lo, hi: f"First, {d(lo + (hi - lo) // 3, hi)} is the naive guess, and about "
                      f"{d(20, 70)} of every hundred players stop there.",
    lambda d, lo, hi: f"Suppose the average lands at {d(lo + (hi - lo) // 4, hi - 10)}, with "
                      f"{d(10, 50)} players in a hundred picking above {d(lo + 40, hi)}.",
)

_STEPS: tuple[_Writer, ...] = (
    lambda d, lo, hi: f"Taking two thirds of {d(lo + 10, hi)} gives roughly "
                      f"{d(lo + 5, hi - 10)}, so a player who reasons once goes there.",
    lambda d, lo, hi: f"A player who expects that will shade the guess down again, to about "
                      f"{d(lo + 3, hi // 2)}.",
    lambda d, lo, hi: f"If {d(10, 60)} of every hundred players stop after one step and "
                      f"the rest after two, the mix lands close to {d(lo + 5, hi // 2)}.",
    lambda d, lo, hi: f"Repeating the step forever would drive everyone to {lo}, but I "
                      f"doubt many people go past {d(2, 4)} rounds of this.",
    lambda d, lo, hi: f"In experiments with this game, first rounds tend to average in the "
                      f"{d(25, 40)}s, which is lower than pure chance would give.",
    lambda d, lo, hi: f"Some players will pick {hi} or {lo} just to be different, and that "
                      f"moves the average by perhaps {d(1, 6)} points.",
    lambda d, lo, hi: f"The target is a fraction of the average, so being a little below "
                      f"the crowd is safer than being above it; I keep a margin of "
                      f"{d(1, 5)}.",
    lambda d, lo, hi: f"Against clever players I would go lower, near {d(lo, lo + 15)}; "
                      f"against a casual crowd, nearer {d(hi // 4, hi // 2)}.",
    lambda d, lo, hi: f"Weighing the two kinds of players about {d(40, 70)} to "
                      f"{d(30, 60)}, my estimate of the average becomes {d(lo + 15, hi // 2)}.",
    lambda d, lo, hi: f"Two thirds of that estimate is about {d(lo + 8, hi // 3)}, and I "
                      f"round it to a whole number.",
    lambda d, lo, hi: f"I also allow for noise: with many players a difference of "
                      f"{d(1, 3)} either way hardly changes who wins.",
)


def reasoning_text(seed: int, tokens: int, number: int | str, low: int, high: int) -> str:
    """Step-by-step reasoning of about ``tokens`` tokens (at most one sentence more),
    ending "The answer is <number>."; the same seed, the same text.

    >>> text = reasoning_text(7, 120, 22, 0, 100)
    >>> text.endswith("The answer is 22.") and 110 < len(text_tokens(text)) < 160
    True
    """
    count = 0

    def draw(lo: int, hi: int) -> int:
        nonlocal count
        count += 1
        lo, hi = min(lo, hi), max(lo, hi)
        return lo + mix64(derive_seed(seed, _STEP, count)) % (hi - lo + 1)

    hi = max(high, low + 1)
    ending = f"So my number is {number}. The answer is {number}."
    sentences = [_OPENERS[draw(0, len(_OPENERS) - 1)](draw, low, hi)]
    used = len(text_tokens(sentences[0])) + len(text_tokens(ending))
    unused = list(_STEPS)
    while used < tokens:
        unused = unused or list(_STEPS)  # each kind of step once before any twice
        sentence = unused.pop(draw(0, len(unused) - 1))(draw, low, hi)
        sentences.append(sentence)
        used += len(text_tokens(sentence))
    return " ".join([*sentences, ending])


def reasoning_length(seed: int, tokens: int | tuple[int, int]) -> int:
    """The length to write for ``seed``: ``tokens``, or uniform in a ``(low, high)``."""
    if isinstance(tokens, int):
        return tokens
    low, high = tokens
    return low + mix64(derive_seed(seed, _STEP)) % (high - low + 1)
