"""Counter-based seed derivation."""

from __future__ import annotations

import pytest

from populace.core import _seeding, derive_seed, mix64, unit_float


def test_mix64_is_splitmix64() -> None:
    # The first outputs of the reference SplitMix64 generator seeded with 0.
    assert mix64(0) == 0xE220A8397B1DCDAF
    assert mix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert 0 <= mix64(-1) < 1 << 64


def test_derive_seed_is_deterministic() -> None:
    assert derive_seed(42, 7, 1) == derive_seed(42, 7, 1)
    assert derive_seed() == derive_seed()
    assert derive_seed(2**70 + 3) == derive_seed(2**70 + 3)


def test_derive_seed_is_order_sensitive_and_distinguishes_inputs() -> None:
    assert derive_seed(42, 7, 1) != derive_seed(42, 1, 7)
    assert derive_seed(1, 2) != derive_seed(2, 1)
    assert derive_seed(0) != derive_seed(0, 0)  # the number of parts matters
    seeds = {derive_seed(42, agent, round_) for agent in range(100) for round_ in range(20)}
    assert len(seeds) == 2000


@pytest.mark.parametrize("parts", [(), (0,), (-1,), (2**64 - 1, 5), (42, 7, 1), (2**100,)])
def test_derive_seed_fits_in_63_bits(parts: tuple[int, ...]) -> None:
    s = derive_seed(*parts)
    assert 0 <= s < 1 << 63


def test_derive_seed_uses_the_top_bit_range() -> None:
    seeds = [derive_seed(1, i) for i in range(2000)]
    assert max(seeds) >= 1 << 62  # well mixed: values spread over the whole 63-bit range
    assert all(0 <= s < 1 << 63 for s in seeds)


def test_unit_float_lies_in_the_unit_interval() -> None:
    values = [unit_float(derive_seed(9, i)) for i in range(10_000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.48 < sum(values) / len(values) < 0.52
    assert unit_float(123) == unit_float(123)
    assert unit_float(1) != unit_float(2)


def test_unit_float_covers_zero_and_stays_below_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The extremes of mix64 are hard to hit by search; pin them instead.
    monkeypatch.setattr(_seeding, "mix64", lambda x: (1 << 64) - 1)
    assert unit_float(1) == 1.0 - 2.0**-53
    monkeypatch.setattr(_seeding, "mix64", lambda x: 0)
    assert unit_float(1) == 0.0
