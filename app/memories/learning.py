"""Importance that learns from feedback (issue 47, item 4): the rule, pure.

The writer's `importance` (0–10) stays as written; beside it a memory has a **learned
importance** ℓ, moved by feedback on whether the memory was of use
(`POST …/memories/{key}/feedback`, `{"used": true|false}`):

- used:     ℓ ← ℓ + α·(10 − ℓ)   (a step toward 10, a fraction α of what is left)
- not used: ℓ ← ℓ − α·ℓ          (a step toward 0)

with α = HTM_IMPORTANCE_LEARNING_RATE (0 < α ≤ 0.5). Each step is an affine map of ℓ whose
result stays in [0, 10] for any ℓ in [0, 10], and a sequence of steps composes into one
affine map ℓ ↦ scale·ℓ + shift with scale = (1 − α)^(steps) and shift ∈ [0, 10·(1 − scale)].
That map is what is stored (memory_access.learn_scale, learn_shift, migration 0027),
applied to the writer's current importance: ℓ = scale·importance + shift. So a memory
without feedback learns nothing (ℓ = importance), a PUT or PATCH of the importance moves ℓ
with it, and the steps keep their order however they are batched (the access-count flush
writes a process's steps about once a second, composing them after the stored ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_IMPORTANCE = 10.0


@dataclass(frozen=True)
class Steps:
    """Feedback steps composed into one affine map ℓ ↦ scale·ℓ + shift, with their counts."""

    scale: float = 1.0
    shift: float = 0.0
    used: int = 0
    unused: int = 0

    def then(self, later: Steps) -> Steps:
        """These steps, then `later`'s."""
        return Steps(
            scale=later.scale * self.scale,
            shift=later.scale * self.shift + later.shift,
            used=self.used + later.used,
            unused=self.unused + later.unused,
        )


def step(used: bool, rate: float) -> Steps:
    """One feedback: used, a step toward 10; not used, a step toward 0."""
    if used:
        return Steps(scale=1 - rate, shift=rate * MAX_IMPORTANCE, used=1)
    return Steps(scale=1 - rate, unused=1)


def learned(importance: float, feedback: Sequence[float] | None) -> float | None:
    """The learned importance of a memory of `importance` with `feedback` (scale, shift,
    used, unused) as read (app/memories/read_repository.py); None without feedback."""
    if not feedback:
        return None
    scale, shift = feedback[0], feedback[1]
    return min(MAX_IMPORTANCE, max(0.0, scale * importance + shift))
