"""Deployments: the service as an operator would run it, several in one eval.

A deployment is a name, environment overrides for the service (`{"HTM_SEARCH_TEXT":
"plain"}`: settings read by app/config.py's Settings, prefix HTM_; an unknown HTM_ variable is
ignored by the service), fields added under every configuration's request (`request`), and the
configuration its floor table is drawn from (`headline`), and the configurations it runs
(`configs`: their names; all when absent). Each deployment gets a fresh database and
namespaces prefixed by its name, and loads each conversational set in every mode of the run
(sets.py: how a client sends a turn is the mode's, not the deployment's).

The default run compares two:

- `old-default`: the service as it was before contextual search text: `HTM_SEARCH_TEXT=plain`
  (and the recall settings added with it at their neutral values: the question's vector as
  asked, no speaker boost, no floor), its headline the plain `{"strategy": "hybrid"}` request;
  it runs the baseline's `vector`, `fulltext` and `hybrid`.
- `default`: the service's own defaults, its headline a bare request (`default`: `{}`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.runner import EVAL_FIELDS, Config

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,29}")


@dataclass(frozen=True)
class Deployment:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    headline: str = "default"
    configs: tuple[str, ...] | None = None  # None: every configuration of the run
    # the configuration the floor table is drawn from when it ran (a floor already applied
    # would hide the hits below it); else the headline
    calibrate: str | None = None
    labels: bool = False  # the set's changed facts labelled in docs mode (sets.py conv_set)

    @property
    def prefix(self) -> str:
        """Its namespaces' prefix: `eval-old-default-` + `conv-d01`."""
        return f"eval-{self.name}-"

    @property
    def database(self) -> str:
        return "htm_eval_" + self.name.replace("-", "_")


# The settings the search-text change added, at the values that behave as before it (a
# service that does not know one ignores it).
OLD_ENV = {
    "HTM_SEARCH_TEXT": "plain",
    "HTM_RECALL_VECTOR_QUERY": "same",
    "HTM_RECALL_SPEAKER_WEIGHT": "0",
    "HTM_RECALL_MIN_SCORE": "0",
    "HTM_DEDUPE": "off",
    "HTM_RECALL_VECTOR_WEIGHT": "0.3",  # hybrid's fusion before the search text
    "HTM_RECALL_FULLTEXT_WEIGHT": "0.7",
}
# The baseline only: the fusion alternatives are measured on the service's defaults.
OLD_DEFAULT = Deployment("old-default", OLD_ENV, {}, "hybrid", ("vector", "fulltext", "hybrid"))
DEFAULT = Deployment("default", {}, {}, "default", calibrate="default-no-floor")
DEFAULTS = (OLD_DEFAULT, DEFAULT)


def check(d: Deployment) -> Deployment:
    if not NAME.fullmatch(d.name):
        raise ValueError(f"deployment name {d.name!r}: 1 to 30 of a-z 0-9 -, not first '-'")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in d.env.items()):
        raise ValueError(f"deployment {d.name}: env maps names to strings")
    if EVAL_FIELDS & d.request.keys():
        raise ValueError(f"deployment {d.name}: query, limit and working memory are the eval's")
    return d


def load_deployments(path: Path) -> list[Deployment]:
    """A JSON list of {"name", "env"?, "request"?, "headline"?, "configs"?, "calibrate"?,
    "labels"?}."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, list):
        raise ValueError(f"{path}: a list of deployments")
    out = []
    for item in raw:
        fields = {"name", "env", "request", "headline", "configs", "calibrate", "labels"}
        unknown = set(item) - fields
        if unknown:
            raise ValueError(f"{path}: unknown deployment fields {sorted(unknown)}")
        out.append(
            check(
                Deployment(
                    str(item["name"]),
                    dict(item.get("env", {})),
                    dict(item.get("request", {})),
                    str(item.get("headline", "default")),
                    None if item.get("configs") is None else tuple(map(str, item["configs"])),
                    None if item.get("calibrate") is None else str(item["calibrate"]),
                    bool(item.get("labels", False)),
                )
            )
        )
    names = [d.name for d in out]
    if not out or len(set(names)) != len(names):
        raise ValueError(f"{path}: at least one deployment, with distinct names: {names}")
    return out


def configs_of(d: Deployment, configs: list[Config]) -> list[Config]:
    """The run's configurations this deployment runs, in the run's order."""
    return [c for c in configs if d.configs is None or c.name in d.configs]


def select(deployments: list[Deployment], names: str | None) -> list[Deployment]:
    """Those named in a comma-separated list (all when None), in the list's order."""
    if not names:
        return deployments
    by_name = {d.name: d for d in deployments}
    wanted = names.split(",")
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise ValueError(f"unknown deployments: {', '.join(unknown)}; known: {', '.join(by_name)}")
    return [by_name[n] for n in wanted]
