"""The MCP server in-process, through the SDK's own client: schemas, results, errors, limits, the ledger."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from crucible.server import SessionConfig, ToolLimits, build_server
from crucible.server import app as server_app
from crucible.server.ledger import Ledger
from crucible.toolkit.results import Evaluation
from crucible.toolkit.task import find_task
from crucible.toolkit.workspace import materialize

FIXTURES = Path(__file__).parent / "fixtures/tasks"
PLANTED = Path(__file__).parent / "planted"
TASK = "triton2triton/vadd"
TOOLS = {"get_task", "compile", "run_tests", "profile", "submit"}

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _fixture_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    materialize(find_task(TASK, FIXTURES), tmp_path / "ws")
    return tmp_path / "ws"


def session(ws: Path, **limits: float) -> SessionConfig:
    return SessionConfig(task_id=TASK, workspace=ws, ledger=ws.parent / "session" / "ledger.db",
                         backend="cpu", limits=ToolLimits(**limits))


def plant(ws: Path, name: str) -> None:
    shutil.copyfile(PLANTED / name, ws / "kernel.py")


def ledger(ws: Path) -> Ledger:
    return Ledger(ws.parent / "session" / "ledger.db")


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def worker_processes() -> list[int]:
    """Live descendants of this process (evaluation workers run in their own session, but stay children)."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == me:
            found.append(int(pid))
    return found


@pytest.fixture
def one_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's pool with one worker started ahead (it keeps two), so a test knows which one runs the
    next evaluation: the same kill and reap path."""
    monkeypatch.setattr(server_app, "worker_pool", functools.partial(server_app.worker_pool, spares=1))


async def the_spare_worker() -> set[int]:
    """With `one_spare`, the one worker started ahead of need; the next evaluation runs in it."""
    with anyio.fail_after(30):
        while not worker_processes():
            await anyio.sleep(0.05)
    return set(worker_processes())


async def wait_until_gone(pids: set[int], within_s: float = 10) -> set[int]:
    deadline = time.monotonic() + within_s
    while pids & set(worker_processes()) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return pids & set(worker_processes())


# ---------------------------------------------------------------- listing and get_task


async def test_tools_list_shows_the_five_tools_with_schemas_titles_and_annotations(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.title and len(tool.description or "") > 80
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.annotations is not None and tool.annotations.open_world_hint is False
        for name in ("get_task", "compile", "run_tests", "profile"):
            assert tools[name].annotations.read_only_hint is True
            assert tools[name].annotations.idempotent_hint is True
        assert tools["submit"].annotations.read_only_hint is False
        assert tools["submit"].annotations.idempotent_hint is False
        props = tools["run_tests"].input_schema["properties"]
        assert set(props) == {"configs", "seeds"} and "description" in props["seeds"]
        assert "accepted" in tools["submit"].output_schema["properties"]
        assert "roofline" in tools["profile"].output_schema["properties"]
        assert "last submission counts" in (client.instructions or "").lower()


async def test_get_task_shows_the_visible_task_and_nothing_hidden(ws: Path) -> None:
    task = find_task(TASK, FIXTURES)
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("get_task", {})
    assert not result.is_error
    info = result.structured_content
    assert info["id"] == TASK and info["candidate_file"] == "kernel.py" and info["baseline_file"] == "baseline.py"
    assert info["signature"] == "def vadd(x, y, out, *, N)"
    assert info["prompt"] == (FIXTURES / TASK / "PROMPT.md").read_text()
    assert [c["name"] for c in info["configs"]] == ["small", "half"]
    assert info["configs"][1]["values"] == {"N": 4099, "dtype": "float16"}
    assert {t["dtype"]: (t["atol"], t["rtol"]) for t in info["tolerances"]}["float16"] == (1e-2, 1e-2)
    assert info["metrics"] == {"flops": "2*N", "bytes": "3*N*itemsize"}
    assert info["device"] == {"backend": "cpu", "arch": "sm_90", "timing_comparable": False}
    assert info["limits"]["tool_limits_s"]["run_tests"] == 600
    assert info["workspace"] == str(ws.resolve())
    dumped = json.dumps(info) + text(result)
    assert not any(c.name in dumped for c in task.hidden.configs), "a hidden config leaked"
    assert "solution" not in dumped


# ---------------------------------------------------------------- compile


async def test_compile_reports_kernels_and_the_source_hash_for_the_baseline(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("compile", {})
    assert not result.is_error, text(result)
    report = result.structured_content
    assert report["ok"] and report["target"] == "sm_90" and len(report["source_hash"]) == 64
    assert report["kernels"] and report["kernels"][0]["registers"]


async def test_a_compile_error_is_an_error_result_with_the_compilers_file_and_line(ws: Path) -> None:
    plant(ws, "vadd_syntax.py")
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("compile", {})
        tested = await client.call_tool("run_tests", {})
    assert result.is_error
    assert text(result).startswith("does not compile: kernel.py:1:")
    diag = result.structured_content["diagnostics"][0]
    assert diag["file"] == "kernel.py" and diag["line"] == 1 and diag["severity"] == "error"
    assert tested.is_error and tested.structured_content["status"] == "compile_error"
    assert tested.structured_content["diagnostics"][0]["line"] == 1


# ---------------------------------------------------------------- run_tests


async def test_run_tests_passes_the_baseline_with_per_config_errors_and_times(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1})
    assert not result.is_error, text(result)
    report = result.structured_content
    assert report["status"] == "ok" and report["correct"] is True
    [cfg] = report["configs"]
    assert cfg["config"] == "small" and cfg["status"] == "pass" and cfg["max_abs_err"] == 0
    assert cfg["candidate_us"] > 0 and cfg["baseline_us"] > 0 and cfg["speedup"] > 0
    assert report["speedup_against"] == "baseline" and report["timing_comparable"] is False
    assert "interpreter" in report["timing_note"]


async def test_a_wrong_kernel_is_a_normal_result_with_correct_false_and_the_first_mismatch(ws: Path) -> None:
    plant(ws, "vadd_wrong.py")
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1})
    assert not result.is_error
    report = result.structured_content
    assert report["status"] == "incorrect" and report["correct"] is False
    mismatch = report["configs"][0]["first_mismatch"]
    assert mismatch["output"] == "out" and mismatch["index"] == [255]


async def test_an_unknown_config_is_an_error_naming_the_visible_configs(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("run_tests", {"configs": ["nope"]})
        profiled = await client.call_tool("profile", {"config": "nope"})
    assert result.is_error and profiled.is_error
    assert text(result) == "no visible config named 'nope'; the visible configs are: small, half"


async def test_hidden_config_names_are_refused_and_never_echoed(ws: Path) -> None:
    hidden = find_task(TASK, FIXTURES).hidden.configs[0].name
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("run_tests", {"configs": [hidden]})
        profiled = await client.call_tool("profile", {"config": hidden})
    for r in (result, profiled):
        assert r.is_error and "no visible config named" in text(r)
        others = [c.name for c in find_task(TASK, FIXTURES).hidden.configs[1:]]
        assert not any(name in text(r) for name in others)


async def test_a_missing_candidate_file_is_an_error_saying_how_to_restore_it(ws: Path) -> None:
    (ws / "kernel.py").unlink()
    async with Client(build_server(session(ws))) as client:
        for tool in ("compile", "run_tests", "profile", "submit"):
            result = await client.call_tool(tool, {})
            assert result.is_error and "has no kernel.py" in text(result) and "baseline.py" in text(result)
    assert {c.status for c in ledger(ws).calls()} == {"workspace_error"}


async def test_a_crashing_kernel_is_an_error_result_and_the_server_keeps_serving(ws: Path) -> None:
    plant(ws, "vadd_crash.py")
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1})
        assert result.is_error and result.structured_content["status"] == "crash"
        assert "SIGSEGV" in text(result) or "signal" in text(result).lower()
        assert not (await client.call_tool("get_task", {})).is_error


BAD_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("run_tests", {"seeds": -1}),
    ("run_tests", {"seeds": 0}),
    ("run_tests", {"seeds": 10**30}),
    ("run_tests", {"seeds": "many"}),
    ("run_tests", {"configs": "small,half"}),
    ("run_tests", {"configs": [1, 2]}),
    ("run_tests", {"configs": ["x" * 100_000]}),
    ("run_tests", {"configs": ["small"] * 1000}),
    ("run_tests", {"configs": []}),
    ("run_tests", {"configs": ["../../etc/passwd"]}),
    ("profile", {"config": {"name": "small"}}),
    ("profile", {"ncu": "please"}),
    ("submit", {"note": "n" * 1_000_000}),
]


async def test_bad_arguments_are_error_results_and_never_crash_the_server(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        for tool, args in BAD_ARGUMENTS:
            result = await client.call_tool(tool, args)
            assert result.is_error, (tool, args, text(result))
            assert len(text(result)) < 5000, "an error echoes a huge argument back"
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
        assert not (await client.call_tool("get_task", {"surprise": 1})).is_error
    assert not (ws.parent / "session" / "submissions").exists(), "a rejected submit stored something"
    calls = ledger(ws).calls()
    rejected = [c for c in calls if c.status == "bad_request"]
    assert len(rejected) == len(BAD_ARGUMENTS) + 1, "every rejected call is in the ledger"
    assert rejected[-1].tool == "no_such_tool" and all(c.outcome == "error" for c in rejected)
    assert all(len(json.dumps(c.arguments)) < 5000 for c in calls), "a huge argument was stored whole"


# ---------------------------------------------------------------- limits, cancellation, the lock


async def test_a_hanging_kernel_is_stopped_at_the_tools_time_limit_with_a_clear_error(ws: Path, one_spare: None) -> None:
    plant(ws, "vadd_hang.py")
    async with Client(build_server(session(ws, run_tests=3))) as client:
        busy = await the_spare_worker()
        started = time.monotonic()
        result = await client.call_tool("run_tests", {"configs": ["small"]})
        assert time.monotonic() - started < 20
        assert result.is_error
        assert text(result).startswith("run_tests exceeded its 3 s limit; the evaluation was stopped")
        assert await wait_until_gone(busy, 0.5) == set(), "the worker outlived the call"
        assert not (await client.call_tool("get_task", {})).is_error
    [call, _] = ledger(ws).calls()
    assert call.outcome == "timeout" and call.source_hash and call.duration_s and call.duration_s < 20


async def test_a_compile_and_a_test_right_after_it_each_run_in_a_judge_started_before_them(
        ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        with anyio.fail_after(30):
            while len(worker_processes()) < 2:
                await anyio.sleep(0.05)
        ahead = set(worker_processes())
        assert len(ahead) == 2
        assert not (await client.call_tool("compile", {})).is_error
        assert len(ahead & set(worker_processes())) == 1, "the compile ran in one of the two"
        assert not (await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1})).is_error
        assert not ahead & set(worker_processes()), "the test ran in the other"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancelling_a_call_kills_its_worker_and_is_recorded(ws: Path, mode: str, one_spare: None) -> None:
    plant(ws, "vadd_hang.py")
    async with Client(build_server(session(ws)), mode=mode) as client:
        busy = await the_spare_worker()
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "run_tests", {"configs": ["small"]})
            with anyio.fail_after(30):  # the spare took the job once a new spare is started beside it
                while len(worker_processes()) < 2:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()
        assert await wait_until_gone(busy) == set(), "the worker outlived the cancelled call"
        assert not (await client.call_tool("get_task", {})).is_error
    assert ledger(ws).calls()[0].outcome == "cancelled"


async def test_two_concurrent_evaluations_run_one_at_a_time(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    active, peak = 0, 0

    def fake_evaluate(task, snapshot, request, *, on_progress, cancel, pool=None) -> Evaluation:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        time.sleep(0.3)
        active -= 1
        return Evaluation(task=task.id, snapshot=snapshot.digest, backend="cpu", status="ok", message="ok",
                          correct=True)

    monkeypatch.setattr(server_app, "evaluate", fake_evaluate)
    results: list[CallToolResult] = []
    async with Client(build_server(session(ws))) as client:

        async def call() -> None:
            results.append(await client.call_tool("run_tests", {}))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(call)
    assert peak == 1 and len(results) == 3 and not any(r.is_error for r in results)


async def test_run_tests_reports_increasing_progress(ws: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(build_server(session(ws))) as client:
        await client.call_tool("run_tests", {"seeds": 1}, progress_callback=on_progress)
    values = [p for p, _, _ in seen]
    assert len(seen) >= 3 and values == sorted(values) and len(set(values)) == len(values)
    # Two visible configs, each checked and then timed: four steps.
    assert seen[-1][:2] == (4, 4) and any("small" in (m or "") for _, _, m in seen)
    assert any((m or "").startswith("timing") for _, _, m in seen)


async def test_progress_never_repeats_a_value_nor_passes_the_total() -> None:
    sent: list[tuple[float, float | None]] = []

    class Ctx:
        async def report_progress(self, progress: float, total: float | None, message: str) -> None:
            sent.append((progress, total))

    progress = server_app.Progress(Ctx())  # type: ignore[arg-type]
    await progress(0, None, "start")
    for _ in range(1000):  # 83 minutes of heartbeats, more than any tool call may take
        await progress(0, None, "compiling")
    await progress(1, 2, "checked")
    await progress(2, 2, "timed")
    await progress(2, 2, "deciding")  # no room left under the total: dropped
    values = [v for v, _ in sent]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    assert max(values[:1001]) < 1 and sent[-1] == (2, 2) and len(sent) == 3 + 1000


# ---------------------------------------------------------------- profile, submit, the ledger


async def test_profile_returns_the_engines_profile_of_one_config(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("profile", {"config": "small"})
    assert not result.is_error, text(result)
    prof = result.structured_content
    assert prof["config"] == "small" and prof["status"] == "ok" and prof["backend"] == "cpu"
    assert prof["timing"]["speedup"] > 0 and prof["roofline"]["achieved_gbps"] > 0


async def test_submit_freezes_the_snapshot_outside_the_workspace_and_later_edits_do_not_change_it(ws: Path) -> None:
    original = (ws / "kernel.py").read_text()
    async with Client(build_server(session(ws))) as client:
        first = await client.call_tool("submit", {"note": "the baseline"})
        (ws / "kernel.py").write_text(original + "\n# edited after submitting\n")
        second = await client.call_tool("submit", {})
    assert not first.is_error, text(first)
    report = first.structured_content
    stored = Path(report["stored_at"])
    assert report["accepted"] and report["submission"] == 1 and stored.parent == ws.parent / "session/submissions"
    assert ws.resolve() not in stored.resolve().parents
    assert (stored / "kernel.py").read_text() == original
    assert not (stored / "kernel.py").stat().st_mode & stat.S_IWUSR
    assert report["verdict"]["status"] == "ok" and report["verdict"]["correct"] is True
    assert "after the session" in report["hidden"]
    assert second.structured_content["submission"] == 2, text(second)
    assert second.structured_content["verdict"]["status"] == "ok", second.structured_content
    assert second.structured_content["source_hash"] != report["source_hash"]
    rows = ledger(ws).submissions()
    assert [(r.n, r.status, r.correct, r.note) for r in rows] == [(1, "ok", True, "the baseline"), (2, "ok", True, None)]
    assert rows[0].verdict["source_hash"] == report["source_hash"]


async def test_submitting_a_wrong_kernel_is_recorded_and_says_to_fix_it(ws: Path) -> None:
    plant(ws, "vadd_wrong.py")
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("submit", {})
    assert not result.is_error
    report = result.structured_content
    assert report["accepted"] and report["verdict"]["correct"] is False
    assert "fix it and submit again" in report["message"]


async def test_every_call_is_in_the_ledger_with_its_source_hash_and_outcome(ws: Path) -> None:
    async with Client(build_server(session(ws))) as client:
        await client.call_tool("get_task", {})
        compiled = await client.call_tool("compile", {})
        await client.call_tool("run_tests", {"configs": ["nope"], "seeds": 2})
    calls = ledger(ws).calls()
    assert [(c.tool, c.outcome, c.status) for c in calls] == [
        ("get_task", "ok", "ok"), ("compile", "ok", "ok"), ("run_tests", "error", "bad_request")]
    assert calls[0].source_hash is None
    assert calls[1].source_hash == compiled.structured_content["source_hash"]
    assert calls[2].arguments == {"configs": ["nope"], "seeds": 2}
    assert all(c.duration_s is not None and c.started_at and c.summary for c in calls)
    assert (ws.parent / "session" / "snapshots" / calls[1].source_hash / "kernel.py").is_file()
    journal = ledger(ws).db.execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"


async def test_an_internal_error_is_an_error_result_logged_with_its_traceback(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the toolchain fell over")

    monkeypatch.setattr(server_app, "compile_snapshot", broken)
    async with Client(build_server(session(ws))) as client:
        result = await client.call_tool("compile", {})
    assert result.is_error and text(result).startswith("internal error in crucible's compile (not a problem")
    [call] = ledger(ws).calls()
    assert call.status == "internal_error" and "Traceback" in (call.error or "")
    assert "the toolchain fell over" in capsys.readouterr().err


def test_a_ledger_inside_the_workspace_is_refused(ws: Path) -> None:
    with pytest.raises(ValueError, match="inside the workspace"):
        SessionConfig(task_id=TASK, workspace=ws, ledger=ws / "sub" / "ledger.db")
