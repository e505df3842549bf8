"""Paired timing ratios with a confidence interval, and target verdicts that admit when the noise decides nothing.

On a shared 2-core VM the same code measures 10 % apart from one run to the next. A ratio of two medians hides
that, so the scripts pair the two sides' times from the same round (taken seconds apart, under the same load),
take the median of the per-round ratios, and bootstrap a 95 % interval for that median. A target is `met` only
when the whole interval is on the right side of it, `missed` only when the whole interval is on the wrong side,
and `undecided` otherwise: more rounds, or a quieter machine, are then needed to say more.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import NamedTuple


class RatioEstimate(NamedTuple):
    median: float
    low: float  # 2.5th percentile of the bootstrapped median
    high: float  # 97.5th percentile
    rounds: int

    def __str__(self) -> str:
        return f"{self.median:.2f}× [95 % CI {self.low:.2f}–{self.high:.2f}, {self.rounds} rounds]"


def paired_ratio(
    numerator: Sequence[float], denominator: Sequence[float], resamples: int = 4000, seed: int = 0
) -> RatioEstimate:
    """Median of numerator[i] / denominator[i] over rounds i, with a percentile-bootstrap 95 % interval."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(f"need equally many rounds on both sides, got {len(numerator)} and {len(denominator)}")
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    generator = random.Random(seed)
    medians = sorted(statistics.median(generator.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return RatioEstimate(
        statistics.median(ratios),
        medians[int(0.025 * (resamples - 1))],
        medians[int(0.975 * (resamples - 1))],
        len(ratios),
    )


def verdict(estimate: RatioEstimate, bound: float, at_most: bool) -> str:
    """`met`, `missed` or `undecided` for the target "ratio ≤ bound" (at_most) or "ratio ≥ bound"."""
    inside, outside = (
        (estimate.high <= bound, estimate.low > bound) if at_most else (estimate.low >= bound, estimate.high < bound)
    )
    return "met" if inside else "MISSED" if outside else "undecided (the interval straddles the target)"
