"""Counter-based seed derivation.

The pinned values are the contract "same seed, same run" across versions: change one and every
saved run, recording and checkpoint replays differently. They were computed once from the
SplitMix64 definition; do not regenerate them to make a failing test pass.
"""

from __future__ import annotations

import pytest

from populace.core import derive_seed, mix64, seed_for, unit_float


def test_mix64_is_splitmix64() -> None:
    # The first outputs of the reference SplitMix64 generator seeded with 0.
    assert mix64(0) == 0xE220A8397B1DCDAF
    assert mix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert mix64(1) == 0x910A2DEC89025CC1
    assert mix64(42) == 0xBDD732262FEB6E95
    assert mix64(-1) == 0xE4D971771B652C20


@pytest.mark.parametrize(
    ("parts", "seed"),
    [
        ((), 0x121FB54442D18469),
        ((0,), 0x16587B4FA55F5110),
        ((42,), 0x326C88637BCD4F42),
        ((42, 7, 1), 0x5F81462091B907F6),
        ((42, 1, 7), 0x58AFCFE601E9680F),
        ((-1,), 0x27341C4F83A45509),
        ((2**64 - 1, 5), 0x6D489E2231A2E3D3),
        ((2**70 + 3,), 0x7CB11468365B3BB0),
    ],
)
def test_derive_seed_values_are_pinned(parts: tuple[int, ...], seed: int) -> None:
    assert derive_seed(*parts) == seed


def test_derive_seed_reduces_parts_modulo_2_64() -> None:
    assert derive_seed(2**100) == derive_seed(0)
    assert derive_seed(2**64 + 3) == derive_seed(3)
    assert derive_seed(-1) == derive_seed(2**64 - 1)


@pytest.mark.parametrize(
    ("base", "index", "seed"),
    [
        (0, 0, 0x7110541CBD8EE6D7),
        (0x6DC2FC79491F7FF3, 0, 0x1479883C0A007296),
        (0x6DC2FC79491F7FF3, 1, 0x416F8BA80B0D3BE3),
        (0x6DC2FC79491F7FF3, 999_999, 0x5FE2B280AD2CDC6F),
    ],
)
def test_seed_for_values_are_pinned(base: int, index: int, seed: int) -> None:
    assert seed_for(base, index) == seed


def test_seed_for_gives_distinct_63_bit_seeds() -> None:
    base = derive_seed(42, 3)
    assert base == 0x6DC2FC79491F7FF3
    seeds = [seed_for(base, i) for i in range(10_000)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 1 << 63 for s in seeds)


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


@pytest.mark.parametrize(
    ("seed", "value"),
    [
        (0, 0.8833108082136426),
        (1, 0.5665615751722809),
        (123, 0.7064912217637067),
        (0x01FCC36970EC2A76, 0.5994155373482193),  # derive_seed(9, 0)
    ],
)
def test_unit_float_values_are_pinned(seed: int, value: float) -> None:
    assert unit_float(seed) == value


def test_unit_float_lies_in_the_unit_interval() -> None:
    values = [unit_float(derive_seed(9, i)) for i in range(10_000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert 0.48 < sum(values) / len(values) < 0.52


def test_unit_float_covers_zero_and_stays_below_one() -> None:
    # mix64 is a bijection; these are the preimages of 0 and 2**64 - 1 (found by inverting it).
    assert mix64(0x61C8864680B583EB) == 0
    assert unit_float(0x61C8864680B583EB) == 0.0
    assert mix64(0x31628AF67B2131AB) == (1 << 64) - 1
    assert unit_float(0x31628AF67B2131AB) == 1.0 - 2.0**-53
