"""The measurement settings with a name of their own ('quick', 'full', 'default'), and
how tables name and describe any settings."""

from __future__ import annotations

from dlperf.core.spec import Measurement

#: Quick: the DLBench table at threads 1, 2, 4 in a few minutes on two cores. Fewer timed
#: steps and a shorter warm-up budget; still one fresh process per configuration.
QUICK_MEASUREMENT = Measurement(min_time_s=1.0, min_steps=2, warmup_max_steps=6,
                                warmup_max_time_s=10.0)
FULL_MEASUREMENT = Measurement(min_time_s=3.0, min_steps=5)

#: The settings with a name of their own in tables; any other is 'custom'.
NAMED_SETTINGS = {"quick": QUICK_MEASUREMENT, "full": FULL_MEASUREMENT, "default": Measurement()}


def settings_name(m: Measurement) -> str:
    """'quick', 'full' (the two forms of ``reproduce dlbench``), 'default' (the flags'
    defaults) or 'custom'."""
    return next((name for name, named in NAMED_SETTINGS.items() if named == m), "custom")


#: named settings, fullest first: which of several measurements of one configuration a
#: table shows
FULLEST_FIRST = ("full", "default", "quick")


def settings_rank(m: Measurement) -> int:
    """The settings' place in ``FULLEST_FIRST`` (custom ones last)."""
    name = settings_name(m)
    return FULLEST_FIRST.index(name) if name in FULLEST_FIRST else len(FULLEST_FIRST)


def describe_settings(m: Measurement) -> str:
    """The settings in the terms of the flags that set them."""
    return (f"min-time {m.min_time_s:g} s, min-steps {m.min_steps}, max-steps {m.max_steps}, "
            f"warm-up {m.warmup_min_steps} to {m.warmup_max_steps} steps within "
            f"{m.warmup_max_time_s:g} s (warmup-time), settled within {m.settle_tolerance:.0%}")
