"""How long people take: to notice, to answer a page, to look at a node. Day and night differ.

Each delay is drawn from an exponential distribution with the configured mean for the hour it
starts in: most answers come quickly, a few take far longer, as on any on-call rotation.
"""

from __future__ import annotations

import random

from pitstop.simulate.params import Delay, Humans

MINUTES_PER_DAY = 24 * 60


def is_day(humans: Humans, t_minutes: float) -> bool:
    hour = (t_minutes % MINUTES_PER_DAY) / 60.0
    return humans.day_start_hour <= hour < humans.day_end_hour


def draw(rng: random.Random, humans: Humans, delay: Delay, t_minutes: float) -> float:
    mean = delay.day_minutes if is_day(humans, t_minutes) else delay.night_minutes
    return rng.expovariate(1.0 / mean) if mean > 0 else 0.0
