"""The rules file (kernelbench_rules.toml) and the arithmetic that turns a candidate into sizes.

Pure: nothing here runs a problem file, so kernelbench_trace (in the subprocess) and kernelbench (in the
caller) both use it.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import ImporterError

DEFAULT_RULES = Path(__file__).with_name("kernelbench_rules.toml")
VISIBLE_NAME = "original"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Candidate(Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """The hidden config's name."""
    scale: float = Field(default=1.0, gt=0)
    add: int = 0
    align: int | None = Field(default=None, ge=2)
    """Round each new size to a multiple of this (keeps divisibility by groups or heads)."""
    odd: bool = False
    """Make each new size odd (adding 1 where it is even)."""
    skew: list[float] = Field(default_factory=list)
    """Scales cycled over the sizes in order, instead of `scale`, each round 25% above the last: sizes equal
    in the problem differ here."""

    @model_validator(mode="after")
    def _positive_skew(self) -> Candidate:
        if any(s <= 0 for s in self.skew):
            raise ValueError(f"candidate {self.name}: skew scales must be > 0")
        return self


class SizeRules(Model):
    keep: list[str] = Field(default_factory=list)
    """Globs over variable names that never change."""
    structural: list[str] = Field(default_factory=list)
    """Globs over names that stay fixed unless they change an input's shape."""


class Rules(Model):
    hidden_configs: int = Field(default=6, ge=1)
    min_hidden_configs: int = Field(default=4, ge=1)
    max_output_bytes: int = Field(default=4 << 30, gt=0)
    max_activation_bytes: int = Field(default=8 << 30, gt=0)
    max_total_bytes: int = Field(default=16 << 30, gt=0)
    sizes: SizeRules = Field(default_factory=SizeRules)
    candidates: list[Candidate] = Field(default_factory=list)


def load_rules(path: Path | None = None) -> Rules:
    path = Path(path or DEFAULT_RULES)
    try:
        rules = Rules.model_validate(tomllib.loads(path.read_text()))
    except OSError as exc:
        raise ImporterError(f"cannot read the rules file {path}: {exc}") from None
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ImporterError(f"the rules file {path} is not valid: {exc}") from None
    names = [c.name for c in rules.candidates]
    if VISIBLE_NAME in names or len(set(names)) != len(names):
        raise ImporterError(f"{path}: candidate names must be distinct and not {VISIBLE_NAME!r}: {names}")
    if rules.min_hidden_configs > rules.hidden_configs:
        raise ImporterError(f"{path}: min_hidden_configs ({rules.min_hidden_configs}) is over hidden_configs "
                            f"({rules.hidden_configs})")
    return rules


def matches(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def candidate_sizes(candidate: Candidate, sizes: dict[str, int]) -> dict[str, int]:
    """New values for every size; each differs from its visible value (the hidden configs must move every
    named dimension, or a kernel that hard-codes one of them passes)."""
    new = {}
    for i, (name, old) in enumerate(sizes.items()):
        scale = candidate.scale
        if candidate.skew:  # past the list's end each round is stretched, so no two sizes share a scale
            rounds, at = divmod(i, len(candidate.skew))
            scale = candidate.skew[at] * (1 + 0.25 * rounds)
        step = candidate.align or 1
        v = round(old * scale) + candidate.add
        if candidate.align:
            v = round(v / candidate.align) * candidate.align
        v = max(step, v)
        if candidate.odd and v % 2 == 0:
            v += 1
        if v == old:
            v = old + step if not candidate.odd else old + 2
        new[name] = v
    return new
