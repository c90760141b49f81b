"""The harness's nouns: a Run is a matrix of Sessions (agent x model x task x repeat); a Session ends with
a SessionEnd and its Usage; its last Submission gets a Score. These models are the rows of the store
(harness/store.py) and the contract between the runner, the agents, the scoring and the report."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AgentName = Literal["scripted", "claude-code", "codex", "cursor", "api"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


PLACEMENT_FIELDS = frozenset({"gpus", "ray"})
"""RunConfig fields that say where evaluations run, not what is run: a run may resume elsewhere."""


class RunConfig(Frozen):
    """What `crucible run` was asked to do. Its digest guards `--resume` against a changed config."""

    agent: AgentName = "scripted"
    model: str | None = None
    """The model the agent runs; for `scripted`, the plan (`solution`, `baseline`, `replay:FILE`)."""
    tasks: str = "*"
    """A glob over task ids."""
    suite: str | None = None
    """A named suite (overrides `tasks`)."""
    repeats: int = Field(default=1, ge=1, le=100)
    budget_usd: float | None = Field(default=None, gt=0)
    """Per session."""
    time_limit_s: float = Field(default=1800, gt=0)
    """Per session, wall clock, the agent's part."""
    concurrency: int = Field(default=1, ge=1, le=64)
    sandbox: bool = True
    """False only with an explicit --no-sandbox; recorded with the results."""
    agent_gpu: bool = False
    backend: Literal["auto", "cpu", "cuda", "rocm"] = "auto"
    gpus: list[int] | None = None
    """The GPUs of this host that final scoring may use (`--gpus 0,1`); None: every visible one."""
    ray: str | None = None
    """A Ray cluster's address (`--ray ADDRESS`, or `auto`) to send final scoring to; None: this host."""

    def digest(self) -> str:
        """What a resumed run must share with the original; how many sessions run at once, and on which
        GPUs or cluster they are scored, are not part of it."""
        fields = self.model_dump(mode="json", exclude={"concurrency", *PLACEMENT_FIELDS})
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


class SessionSpec(Frozen):
    """One cell of the matrix."""

    run_id: str
    task: str
    agent: AgentName
    model: str | None
    repeat: int

    @property
    def id(self) -> str:
        model = (self.model or "default").replace("/", "-").replace(":", "-")
        return f"{self.task.replace('/', '__')}__{self.agent}__{model}__r{self.repeat}"


EndReason = Literal["finished", "budget", "time_limit", "turn_limit", "resource_limit", "crash", "infra_error"]


class Usage(Frozen):
    """Accounting for one session (see harness/clients/base.py SessionUsage for how it is parsed)."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    cost_source: Literal["cli", "price_table", "unknown", "none"] = "unknown"
    """`none`: the scripted agent, which uses no model."""
    wall_s: float = 0
    tool_calls: dict[str, int] = Field(default_factory=dict)
    """Calls by tool name, from the session ledger (the server's own record, not the agent's claim)."""
    foreign_events: int = 0
    """Events in the CLI's stream it cannot have written (SessionUsage.foreign_events): the figures above
    are then the largest any event claimed."""


class SessionEnd(Frozen):
    reason: EndReason
    message: str = ""
    exit_code: int | None = None


Verdict = Literal["pass", "incorrect", "compile_error", "no_submission", "timeout", "flagged", "infra_error"]


AUDIT_PREFIX = "speedup>"
"""Score flags starting with this are audit notes (a big speedup, harness/scoring.py), not integrity
evidence; the report lists them apart."""


class Score(Frozen):
    """The final scoring of a session's last submission, in a fresh worker, visible and hidden configs."""

    verdict: Verdict
    message: str
    compiled: bool = False
    correct: bool | None = None
    """Visible configs."""
    generalizes: bool | None = None
    """Hidden configs."""
    speedup_visible: float | None = None
    speedup_hidden: float | None = None
    speedup: float | None = None
    """Geometric mean over all configs; None unless the verdict is pass (a failure earns nothing)."""
    speedup_against: str | None = None
    timing_comparable: bool | None = None
    """Whether the speedups come from timings comparable with other machines' (a GPU's events); False on
    the cpu backend, which times Triton's interpreter and torch on the CPU. None: not recorded (a score
    from before this field; the report then goes by the backend it was scored on)."""
    peak_fraction: float | None = None
    """Geometric mean over the timed configs of the achieved rate over the device's measured ceiling."""
    sol_fraction: float | None = None
    """Geometric mean over the timed configs of the speed-of-light time (the datasheet's limits: bytes
    over bandwidth or flops over peak) over the kernel's time; 1 is the limit. None off a known GPU."""
    flags: list[str] = Field(default_factory=list)
    """Integrity flags, each with its evidence."""
    submission_hash: str | None = None
    evaluator_version: str = ""
    hidden_configs: int | None = None
    """How many hidden configs the task has; None: not recorded."""
    hidden_checked: int | None = None
    """How many of them ran and were checked; the others were skipped as too large for the backend (the
    CPU interpreter), so `generalizes` says nothing about them. None: not recorded."""


class Placement(Frozen):
    """Where one final scoring ran (harness/placement.py on this host, harness/ray_backend.py on a cluster)."""

    gpu: int | None = None
    """The GPU's index on its host; None on the cpu backend."""
    gpu_name: str | None = None
    """The device's name as the judge saw it (else as the host lists it); on the cpu backend, the CPU's."""
    host: str | None = None
    """The Ray node that scored it; None: the run's own host."""
    attempts: int = 1
    """Evaluations it took (0: none could start): more than 1 when a GPU failed under one and it was retried on another (a GPU's
    failure is infrastructure's, never the agent's)."""
    note: str = ""
    """What the placement had to do, e.g. a GPU taken out of rotation or a fallback kind of hardware."""
    hip_on_cuda: bool | None = None
    """A HIP task's kernel ran as HIP on CUDA (nvcc with crucible's headers, on an NVIDIA GPU; docs/hip-on-cuda.md)
    rather than on an AMD GPU: True where its task allows any hardware and the run scored it on NVIDIA, or
    where its `[hardware] fallback = "hip-on-cuda"` let it run there for want of an AMD GPU (the note says
    which); False: it ran on an AMD GPU. None: not a HIP task, not evaluated, or scored before this was
    recorded."""
