"""What reaches the agent (toolkit/agent_view.py): a candidate that reads the task's hidden.toml or its
expert solution and raises the text, or names the task folder's paths, gets none of it back through the
tools or `crucible tool`; its own file and line come first in its error, however long the traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client

from crucible.harness.cli import main
from crucible.server import SessionConfig, build_server
from crucible.toolkit.agent_view import HIDDEN_CONFIG, OUTSIDE, REMOVED, AgentView
from crucible.toolkit.profiling import Profile
from crucible.toolkit.results import ConfigResult, Evaluation, IntegrityFinding, KernelTime, SeedCheck
from crucible.toolkit.task import Task, find_task
from crucible.toolkit.toolchains import BuildResult, BuildTarget, Diagnostic
from crucible.toolkit.workspace import materialize

FIXTURES = Path(__file__).parent / "fixtures/tasks"
TASK = "triton2triton/vadd"


@pytest.fixture
def task() -> Task:
    return find_task(TASK, FIXTURES)


@pytest.fixture
def ws(tmp_path: Path, task: Task) -> Path:
    materialize(task, tmp_path / "ws")
    return tmp_path / "ws"


@pytest.fixture
def view(task: Task, ws: Path, tmp_path: Path) -> AgentView:
    return AgentView.for_task(task, ws, tmp_path / "snapshots" / "abc123")


def hidden_names(task: Task) -> re.Pattern[str]:
    names = "|".join(re.escape(c.name) for c in task.configs("hidden"))
    return re.compile(rf"(?<![\w.-])(?:{names})(?![\w-])")


def public_lines(task: Task) -> set[str]:
    """Lines the agent may see anyway: its files and the visible spec."""
    files = [task.file(n) for n in ("PROMPT.md", "reference.py", "baseline.py", "task.toml")]
    return {line.strip() for f in files for line in f.read_text().splitlines()}


def secret_lines(task: Task, name: str, at_least: int = 1) -> list[str]:
    lines = [line.strip() for line in task.file(name).read_text().splitlines()]
    return [s for s in lines if len("".join(s.split())) >= at_least and s not in public_lines(task)]


def strings(data: object) -> str:
    """Every key and string value of a dumped model, as written (JSON would escape the quotes)."""
    if isinstance(data, dict):
        return "\n".join(f"{k}\n{strings(v)}" for k, v in data.items())
    if isinstance(data, list):
        return "\n".join(map(strings, data))
    return data if isinstance(data, str) else ""


def assert_nothing_secret(task: Task, out: str) -> None:
    assert not hidden_names(task).search(out), "a hidden config name reached the agent"
    for line in secret_lines(task, "hidden.toml"):
        assert line not in out, f"a line of hidden.toml reached the agent: {line!r}"
    for line in secret_lines(task, "solution.py", at_least=12):
        assert line not in out, f"a line of the solution reached the agent: {line!r}"
    assert str(task.root) not in out and str(task.root.parent) not in out, "a task-folder path reached the agent"
    assert "1048577" not in out, "the hidden shape reached the agent"


# ---------------------------------------------------------------- text()


def test_hidden_config_names_are_replaced_as_whole_words_only(task: Task, view: AgentView) -> None:
    out = view.text("config tail failed; big is next; see stderr_tail, bigger, tail-end, tail.")
    assert out == (f"config {HIDDEN_CONFIG} failed; {HIDDEN_CONFIG} is next; see stderr_tail, bigger, tail-end, "
                   f"{HIDDEN_CONFIG}.")


def test_the_hidden_toml_raised_as_text_leaves_none_of_its_lines(task: Task, view: AgentView) -> None:
    content = task.file("hidden.toml").read_text()
    out = view.text("RuntimeError: " + content)
    assert_nothing_secret(task, out)
    assert REMOVED in out


def test_the_hidden_toml_raised_as_one_repr_line_leaves_no_hidden_shape(task: Task, view: AgentView) -> None:
    out = view.text(f"ValueError: {task.file('hidden.toml').read_text()!r}")
    assert_nothing_secret(task, out)


def test_the_agents_own_output_that_merely_resembles_hidden_lines_is_kept(task: Task, view: AgentView) -> None:
    own = "N = 170, tuned N = 1700 for tails; dtype = \"float32\""
    assert view.text(own) == own


def test_the_solution_raised_as_text_leaves_none_of_its_own_lines(task: Task, view: AgentView) -> None:
    out = view.text("RuntimeError: " + task.file("solution.py").read_text())
    assert_nothing_secret(task, out)
    # what the agent has anyway (the baseline's lines) is no secret
    assert "import triton.language as tl" in out and "mask = offs < n" in out


def test_task_folder_paths_are_hidden_and_the_agents_own_are_shown_relative(task: Task, ws: Path,
                                                                            view: AgentView) -> None:
    snap = view.snapshot_root
    assert snap is not None
    out = view.text(f"open {task.root}/hidden.toml failed; {task.root / 'solution.py'}: nope\n"
                    f'File "{ws}/kernel.py", line 3\nFile "{snap}/kernel.py", line 4\n'
                    f"escape {ws}/../../{task.root.name}/hidden.toml; sub {ws}/lib/util.py. end")
    assert_nothing_secret(task, out)
    assert out.count(OUTSIDE) == 3
    assert 'File "kernel.py", line 3' in out and 'File "kernel.py", line 4' in out
    assert "sub lib/util.py. end" in out


def test_a_task_folder_inside_the_workspace_is_still_hidden(task: Task, tmp_path: Path) -> None:
    view = AgentView.for_task(task, task.root.parent)
    assert view.text(f"{task.root}/hidden.toml") == OUTSIDE


def test_a_view_used_before_its_snapshot_was_known_shows_the_snapshots_paths_relative(task: Task, ws: Path,
                                                                                       tmp_path: Path) -> None:
    base = AgentView.for_task(task, ws)  # the server's, used for an internal error before any snapshot
    assert base.text(f"{tmp_path}/snap/kernel.py") == OUTSIDE
    assert base.with_snapshot(tmp_path / "snap").text(f"{tmp_path}/snap/kernel.py") == "kernel.py"


def test_text_is_cut_to_its_limit_keeping_head_and_tail(view: AgentView) -> None:
    out = view.text("first line\n" + "x" * 10_000 + "\nlast line", limit=500)
    assert len(out) <= 500 and out.startswith("first line") and out.endswith("last line")
    assert "characters left out" in out


# ---------------------------------------------------------------- error()


def long_traceback(ws: Path, library_frames: int = 40) -> str:
    lines = ["Traceback (most recent call last):"]
    for i in range(library_frames):
        lines += [f'  File "/usr/lib/python3.11/site-packages/lib/module_{i}.py", line {100 + i}, in step_{i}',
                  f"    result = step_{i + 1}(state, payload, options)  # library frame {i}",
                  "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"]
        if i == library_frames // 2:
            lines += [f'  File "{ws}/kernel.py", line 7, in vadd',
                      "    BLOCK = pick_block(N)"]
    lines.append("ValueError: block size must be a power of two, got 3000")
    return "\n".join(lines)


def test_the_workspace_frame_comes_first_in_a_long_traceback_and_the_exception_is_kept(ws: Path,
                                                                                       view: AgentView) -> None:
    tb = long_traceback(ws)
    assert len(tb) - tb.index("/kernel.py") > 3000  # the traceback's last 3000 characters miss the frame
    out = view.error(tb)
    assert len(out) <= 3000
    ours = out.index('File "kernel.py", line 7, in vadd\n    BLOCK = pick_block(N)')
    assert ours < out.index(OUTSIDE), "a library frame came before the agent's own"
    assert out.index("ValueError: block size must be a power of two, got 3000") < out.index(OUTSIDE)
    assert "frames or lines left out" in out
    assert "library frame 39" in out, "the innermost library frames are kept"
    assert "/usr/lib" not in out


def test_a_chained_traceback_keeps_every_exception_and_the_frames_of_each(ws: Path, view: AgentView) -> None:
    tb = (f'Traceback (most recent call last):\n  File "{ws}/kernel.py", line 3, in helper\n    x = table[k]\n'
          "KeyError: 'k'\n\nDuring handling of the above exception, another exception occurred:\n\n"
          'Traceback (most recent call last):\n  File "/opt/lib/runner.py", line 9, in run\n    call()\n'
          f'  File "{ws}/kernel.py", line 5, in vadd\n    raise RuntimeError("no table")\n'
          "RuntimeError: no table\n")
    out = view.error("config small: the candidate raised an error:\n" + tb)
    assert out.startswith("config small: the candidate raised an error:\nIn your files (innermost last):\n"
                          '  File "kernel.py", line 3, in helper\n    x = table[k]\n'
                          '  File "kernel.py", line 5, in vadd\n')
    assert out.index("KeyError: 'k'") < out.index("During handling") < out.index("RuntimeError: no table")
    assert out.index("RuntimeError: no table") < out.index('File "<path outside the workspace>", line 9, in run')


def test_a_compiler_error_as_free_text_keeps_its_head_and_tail_without_outside_paths(view: AgentView,
                                                                                     ws: Path) -> None:
    log = (f"{ws}/kernel.cu(12): error: identifier \"blockDim_x\" is undefined\n"
           + "".join(f"/usr/local/cuda/include/cuda_fp16.hpp({i}): note: candidate\n" for i in range(400))
           + "1 error detected in the compilation of \"kernel.cu\".")
    out = view.error(log, limit=1500)
    assert len(out) <= 1500
    assert out.startswith('kernel.cu(12): error: identifier "blockDim_x" is undefined')
    assert out.endswith('1 error detected in the compilation of "kernel.cu".')
    assert "/usr/local" not in out and OUTSIDE in out


def test_a_raised_hidden_toml_inside_a_traceback_is_removed_and_the_raise_is_shown(task: Task, ws: Path,
                                                                                   view: AgentView) -> None:
    tb = (f'Traceback (most recent call last):\n  File "/srv/crucible/toolkit/runtime.py", line 70, in call\n'
          f"    returned = fn(*inputs, *outputs, **params)\n"
          f'  File "{ws}/kernel.py", line 15, in vadd\n'
          f"    raise RuntimeError(open({str(task.root / 'hidden.toml')!r}).read())\n"
          f"RuntimeError: {task.file('hidden.toml').read_text()}{task.root / 'solution.py'}\n")
    out = view.error(tb)
    assert_nothing_secret(task, out)
    assert out.index('File "kernel.py", line 15, in vadd') < out.index("RuntimeError: [[configs]]")


# ---------------------------------------------------------------- the result models


def test_an_evaluation_loses_its_hidden_configs_and_its_texts_are_filtered(task: Task, ws: Path,
                                                                          view: AgentView) -> None:
    leak = f"{task.file('hidden.toml').read_text()} at {task.root}"
    ev = Evaluation(
        task=TASK, snapshot="abc123", backend="cpu", status="error", message=f"config small: raised:\n{leak}",
        configs=[ConfigResult(config="small", status="error", message=long_traceback(ws)),
                 ConfigResult(config="half", status="fail", message=f"wrong near big: {leak}",
                              seeds=[SeedCheck(seed=0, ok=False, outputs=[], problems=[leak])],
                              integrity=[IntegrityFinding(defence="forbidden_op", config="half", evidence=leak)]),
                 ConfigResult(config="tail", status="pass")],
        kernels={"small": [KernelTime(name=f"k_{task.root}", calls=1, total_us=1, mean_us=1, share=1)],
                 "big": []},
        build=BuildResult(ok=True, language="triton", target=BuildTarget(backend="cpu", arch="sm_90"),
                          log=leak).model_dump(mode="json"),
        integrity=[IntegrityFinding(defence="protocol", evidence=leak),
                   IntegrityFinding(defence="protocol", config="tail", evidence="on a hidden config")],
        isolation={"sandbox": str(task.root)}, stderr_tail=long_traceback(ws, 80))
    out = view.evaluation(ev)
    assert [c.config for c in out.configs] == ["small", "half"] and list(out.kernels) == ["small"]
    assert len(out.integrity) == 1
    assert out.configs[0].message.startswith('In your files (innermost last):\n  File "kernel.py", line 7')
    assert out.stderr_tail.startswith('In your files (innermost last):\n  File "kernel.py", line 7')
    assert_nothing_secret(task, strings(out.model_dump(mode="json")))


def test_a_build_and_a_profile_are_filtered_like_an_evaluation(task: Task, ws: Path, view: AgentView) -> None:
    leak = f"{task.file('solution.py').read_text()}\n{task.file('hidden.toml').read_text()}\n{task.root}/x.py"
    build = BuildResult(ok=False, language="triton", target=BuildTarget(backend="cpu", arch="sm_90"),
                        diagnostics=[Diagnostic(file=str(task.root / "solution.py"), line=1, message=leak),
                                     Diagnostic(file="kernel.py", line=2, message="tail")],
                        log=leak, artifact=str(ws / "kernel.py"), command=[str(task.root / "hidden.toml")])
    shown = view.build(build)
    assert shown.artifact == "kernel.py" and shown.diagnostics[1].message == HIDDEN_CONFIG
    assert_nothing_secret(task, strings(shown.model_dump(mode="json")))
    prof = Profile(task=TASK, snapshot="abc123", backend="cpu", config="small", status="crash", message=leak,
                   timing=ConfigResult(config="small", status="pass", message=leak),
                   kernels=[KernelTime(name=leak, calls=1, total_us=1, mean_us=1, share=1)],
                   resources=[{"name": leak, "registers": 32}], ncu={leak: {"m": leak}}, notes=[leak])
    assert_nothing_secret(task, strings(view.profile(prof).model_dump(mode="json")))


# ---------------------------------------------------------------- end to end


def plant_leaking_kernel(task: Task, ws: Path) -> int:
    """The red team's candidate: raises the content of hidden.toml and the solution's path. Where the
    sandbox keeps it from reading the file, it raises a copy brought in its source, so the filter is
    tested either way. Returns the line of the raise."""
    source = (ws / "kernel.py").read_text().rstrip("\n").splitlines() + [
        "", "",
        f"HIDDEN_COPY = {task.file('hidden.toml').read_text()!r}",
        "", "",
        "def vadd(x, y, out, *, N):",
        "    try:",
        f"        text = open({str(task.file('hidden.toml'))!r}).read()",
        "    except OSError:",
        "        text = HIDDEN_COPY",
        f"    raise RuntimeError(text + {str(task.file('solution.py'))!r})",
    ]
    (ws / "kernel.py").write_text("\n".join(source) + "\n")
    return len(source)


def test_crucible_tool_shows_a_leaking_kernel_its_own_raise_and_nothing_secret(
        task: Task, ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    line = plant_leaking_kernel(task, ws)
    args = ["--task", TASK, "--workspace", str(ws), "--backend", "cpu"]
    assert main(["tool", "test", *args, "--config", "small", "--seeds", "1"]) == 1
    out = capsys.readouterr().out
    assert main(["tool", "test", *args, "--config", "small", "--seeds", "1", "--json"]) == 1
    out += capsys.readouterr().out
    assert main(["tool", "compile", *args, "--json"]) == 1
    out += capsys.readouterr().out
    assert main(["tool", "compile", *args]) == 1
    out += capsys.readouterr().out
    assert_nothing_secret(task, out)
    assert f'File "kernel.py", line {line}, in vadd' in out
    assert json.dumps(f'File "kernel.py", line {line}, in vadd')[1:-1] in out  # in the --json output too


def test_crucible_tool_refuses_a_hidden_config_name(task: Task, ws: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    assert main(["tool", "test", "--task", TASK, "--workspace", str(ws), "--config", "big"]) == 2
    assert "no visible config named 'big'; the visible configs are: small, half" in capsys.readouterr().err


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_mcp_tools_show_a_leaking_kernel_its_own_raise_and_nothing_secret(
        task: Task, ws: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    line = plant_leaking_kernel(task, ws)
    session = SessionConfig(task_id=TASK, workspace=ws, ledger=ws.parent / "session" / "ledger.db", backend="cpu")
    async with Client(build_server(session)) as client:
        results = [await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1}),
                   await client.call_tool("compile", {}),
                   await client.call_tool("profile", {"config": "small"})]
    for result in results:
        assert result.is_error
        out = "\n".join(getattr(c, "text", "") for c in result.content)
        out += strings(result.structured_content)
        assert_nothing_secret(task, out)
        assert f'File "kernel.py", line {line}, in vadd' in out or f"kernel.py:{line}:" in out
