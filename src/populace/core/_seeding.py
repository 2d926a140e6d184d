"""Counter-based seed derivation: one run seed, a distinct reproducible seed per use.

A million agents cannot each hold a ``random.Random`` (2.5 KB apiece), and seeding one per
call is slow. Instead every consumer derives a 63-bit seed from the run seed and the
coordinates of its use (agent id, step, call number) with SplitMix64, which is cheap,
stateless and independent of scheduling order.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64 finaliser: a well-mixed 64-bit value from any integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def derive_seed(*parts: int) -> int:
    """Combine integers into one 63-bit seed; same parts, same seed; order matters.

    >>> derive_seed(42, 7, 1) == derive_seed(42, 7, 1)
    True
    >>> derive_seed(42, 7, 1) != derive_seed(42, 1, 7)
    True
    """
    h = 0x243F6A8885A308D3
    for p in parts:
        h = mix64(h ^ (p & _MASK))
    return h >> 1


def unit_float(seed: int) -> float:
    """A float in [0, 1) determined by ``seed``."""
    return (mix64(seed) >> 11) * (1.0 / (1 << 53))


def seed_for(base: int, index: int) -> int:
    """The seed of member ``index`` under ``base`` (itself from :func:`derive_seed`).

    One mix instead of :func:`derive_seed`'s one per part: for per-agent seeds in a hot
    loop, derive ``base`` once per step and call this per agent. Distinct indices give
    distinct seeds (SplitMix64 is a bijection).
    """
    return mix64(base ^ index) >> 1


#: Salts the offset of :func:`uniform_pick` away from the number it shifts.
_PICK = 0x0FF5E7_D2A3


def uniform_pick(number: int, seed: int, m: int) -> int:
    """One of ``m`` choices for ``number`` (a stand-in model's answer): uniform over
    ``range(m)`` whatever ``number``'s own distribution, because a seeded offset uniform
    over the choices is added (128 bits of offset: 64 would be biased past 2**40 choices).
    The dummy model's 101 numbers cannot pick fairly among 5 or 11 options on their own.

    >>> sorted({uniform_pick(7, s, 3) for s in range(50)})
    [0, 1, 2]
    """
    offset = mix64(seed ^ _PICK)
    if m > 1 << 40:
        offset = offset << 64 | mix64(offset)
    return (number + offset) % m

