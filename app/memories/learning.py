"""Importance that learns from use (issue 47, item 4): the rule, pure.

The writer's `importance` (0–10) stays as written; beside it a memory has a **learned
importance** ℓ, moved by four kinds of evidence, each one step of the same rule, a fraction r
of the way toward 10 (a sign of worth) or toward 0 (a sign against):

- used:             ℓ ← ℓ + r·(10 − ℓ), r = α     (`POST …/feedback {"used": true}`)
- pinned:           ℓ ← ℓ + r·(10 − ℓ), r = 2α    (`{"pinned": true}`: kept at hand, the
                                                   strongest sign of use)
- not used:         ℓ ← ℓ − r·ℓ,        r = α     (`{"used": false}`)
- forgotten nearby: ℓ ← ℓ − r·ℓ,        r = α/2   (a memory among the nearest by vector to
                                                   one a robot forgot: app/memories/forgetting.py)

with α = HTM_IMPORTANCE_LEARNING_RATE (0 < α ≤ 0.5, so every r ≤ 1). Each step is an affine
map of ℓ whose result stays in [0, 10] for any ℓ in [0, 10], and a sequence of steps composes
into one affine map ℓ ↦ scale·ℓ + shift with scale = Π(1 − rᵢ) and shift ∈ [0, 10·(1 − scale)].
That map is what is stored (memory_access.learn_scale, learn_shift, migration 0027; the
counts of each kind beside it, migrations 0027 and 0032), applied to the writer's current
importance: ℓ = scale·importance + shift. So a memory without feedback learns nothing
(ℓ = importance), a PUT or PATCH of the importance moves ℓ with it, and the steps keep their
order however they are batched (the access-count flush writes a process's steps about once a
second, composing them after the stored ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MAX_IMPORTANCE = 10.0

Kind = Literal["used", "pinned", "unused", "forgotten_nearby"]
# Each kind's step: (the fraction of α it takes, toward 10 or not).
RULE: dict[Kind, tuple[float, bool]] = {
    "used": (1.0, True),
    "pinned": (2.0, True),
    "unused": (1.0, False),
    "forgotten_nearby": (0.5, False),
}


@dataclass(frozen=True)
class Steps:
    """Feedback steps composed into one affine map ℓ ↦ scale·ℓ + shift, with their counts."""

    scale: float = 1.0
    shift: float = 0.0
    used: int = 0
    unused: int = 0
    pinned: int = 0
    forgotten_nearby: int = 0

    def then(self, later: Steps) -> Steps:
        """These steps, then `later`'s."""
        return Steps(
            scale=later.scale * self.scale,
            shift=later.scale * self.shift + later.shift,
            used=self.used + later.used,
            unused=self.unused + later.unused,
            pinned=self.pinned + later.pinned,
            forgotten_nearby=self.forgotten_nearby + later.forgotten_nearby,
        )

    @property
    def count(self) -> int:
        return self.used + self.unused + self.pinned + self.forgotten_nearby


def rate_of(kind: Kind, rate: float) -> float:
    """The fraction of the way one step of `kind` takes, at learning rate α = `rate`."""
    return RULE[kind][0] * rate


def step(kind: Kind, rate: float) -> Steps:
    """One step of `kind` (RULE): toward 10 or toward 0, a fraction rate_of(kind, rate)."""
    r = rate_of(kind, rate)
    up = RULE[kind][1]
    return Steps(scale=1 - r, shift=r * MAX_IMPORTANCE if up else 0.0, **{kind: 1})


def learned(importance: float, feedback: Sequence[float] | None) -> float | None:
    """The learned importance of a memory of `importance` with `feedback` (scale, shift,
    used, unused, pinned, forgotten nearby) as read (app/memories/read_repository.py);
    None without feedback."""
    if not feedback:
        return None
    scale, shift = feedback[0], feedback[1]
    return min(MAX_IMPORTANCE, max(0.0, scale * importance + shift))
