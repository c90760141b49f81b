"""The runner's sandbox reads only an allow-list: Python, torch, Triton, the snapshot and its own scratch,
never the task suite, other folders under /tmp, or /dev/shm.

Landlock cannot be undone, so every restricted check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from crucible.toolkit.sandbox import probe, runner_readable

REPO = Path(__file__).resolve().parents[1]
HIDDEN = REPO / "tasks" / "cuda2cuda" / "rmsnorm" / "hidden.toml"

needs_landlock = pytest.mark.skipif(probe().landlock_abi < 1, reason="no Landlock on this kernel")

# argv: scratch, snapshot; then the check's own code, which sees `scratch`, `snapshot` and `attempt`.
PRELUDE = """
import errno, json, os, sys
from crucible.toolkit.sandbox import restrict_filesystem, runner_readable
scratch, snapshot = sys.argv[1], sys.argv[2]
restrict_filesystem([scratch], runner_readable([snapshot]))

def attempt(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"
"""


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    scratch, snapshot = tmp_path / "scratch", tmp_path / "snapshot"
    scratch.mkdir()
    snapshot.mkdir()
    return scratch, snapshot


def run_restricted(folders: tuple[Path, Path], code: str, timeout: float = 60) -> str:
    scratch, snapshot = folders
    env = {**os.environ, "HOME": str(scratch), "TMPDIR": str(scratch), "TRITON_CACHE_DIR": str(scratch / "triton"),
           "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", PRELUDE + code, str(scratch), str(snapshot)], cwd=scratch,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_readable_list_never_covers_the_repo_root_or_the_task_suite(tmp_path: Path) -> None:
    readable = [Path(p) for p in runner_readable([str(tmp_path)])]
    assert str(tmp_path) in map(str, readable)
    for secret in (REPO, REPO / "tasks", HIDDEN):
        assert not [p for p in readable if secret.is_relative_to(p)], secret
    assert all(p.exists() for p in readable)
    assert len(readable) == len(set(readable))


def test_the_c_compiler_triton_builds_its_launchers_with_is_readable() -> None:
    readable = [Path(p) for p in runner_readable([])]
    for name in ("gcc", "cc"):
        if found := shutil.which(name):
            assert any(Path(found).resolve().is_relative_to(p) for p in readable), found


@needs_landlock
@pytest.mark.timeout(240)
def test_a_runner_imports_torch_and_triton_and_runs_a_kernel_in_the_interpreter(folders: tuple[Path, Path]) -> None:
    scratch, snapshot = folders
    (snapshot / "candidate.txt").write_text("from the snapshot")
    code = """
import torch, triton, triton.language as tl

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

x, y = torch.arange(100, dtype=torch.float32), torch.ones(100)
out = torch.empty_like(x)
add[(4,)](x, y, out, 100, BLOCK=32)
open(os.path.join(scratch, "written"), "w").write("ok")
print(json.dumps({"kernel": bool(torch.equal(out, x + y)),
                  "snapshot": open(os.path.join(snapshot, "candidate.txt")).read()}))
"""
    result = json.loads(run_restricted(folders, code, timeout=200))
    assert result == {"kernel": True, "snapshot": "from the snapshot"}
    assert (scratch / "written").read_text() == "ok"


@needs_landlock
def test_a_runner_cannot_read_the_hidden_configs_of_the_task_suite(folders: tuple[Path, Path]) -> None:
    assert HIDDEN.read_text()  # readable outside the sandbox
    code = f"print(attempt(lambda: open({str(HIDDEN)!r}).read()))"
    assert run_restricted(folders, code) == "EACCES"


@needs_landlock
def test_a_runner_cannot_read_another_folder_under_tmp(folders: tuple[Path, Path],
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    secret = tmp_path_factory.mktemp("other-session") / "secret.txt"
    secret.write_text("not yours")
    code = f"print(attempt(lambda: open({str(secret)!r}).read()))"
    assert run_restricted(folders, code) == "EACCES"


@needs_landlock
def test_a_runner_cannot_list_root_home_or_the_repo_root(folders: tuple[Path, Path]) -> None:
    code = f"print(json.dumps([attempt(lambda: os.listdir(p)) for p in ('/root', {str(REPO)!r})]))"
    assert json.loads(run_restricted(folders, code)) == ["EACCES", "EACCES"]


@needs_landlock
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this machine")
def test_a_runner_cannot_leave_a_file_in_dev_shm(folders: tuple[Path, Path]) -> None:
    path = Path("/dev/shm") / f"crucible-test-{uuid.uuid4().hex}"
    try:
        code = f"print(attempt(lambda: open({str(path)!r}, 'w').write('x')))"
        assert run_restricted(folders, code) == "EACCES"
        assert not path.exists()
    finally:
        path.unlink(missing_ok=True)


@needs_landlock
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this machine")
def test_a_runner_cannot_read_or_list_what_others_keep_in_dev_shm(folders: tuple[Path, Path]) -> None:
    path = Path("/dev/shm") / f"crucible-test-{uuid.uuid4().hex}"  # another process's shared memory
    path.write_text("an object store")
    try:
        code = (f"print(json.dumps([attempt(lambda: open({str(path)!r}).read()),"
                " attempt(lambda: os.listdir('/dev/shm'))]))")
        assert json.loads(run_restricted(folders, code)) == ["EACCES", "EACCES"]
    finally:
        path.unlink(missing_ok=True)


@needs_landlock
def test_a_runner_can_still_use_dev_null_and_dev_urandom(folders: tuple[Path, Path]) -> None:
    code = ("print(json.dumps([attempt(lambda: open('/dev/null', 'w').write('x')),"
            " attempt(lambda: open('/dev/urandom', 'rb').read(8))]))")
    assert json.loads(run_restricted(folders, code)) == ["ok", "ok"]


def test_rlimit_fsize_makes_a_write_past_the_limit_fail_with_efbig(tmp_path: Path) -> None:
    code = """
import errno, json, os, signal, sys
from crucible.toolkit.sandbox import apply_rlimits
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # by default the signal kills the writer instead
described = apply_rlimits({"FSIZE": 1 << 20})
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
written, error = 0, None
try:
    while True:
        written += os.write(fd, b"x" * (256 << 10))
except OSError as exc:
    error = errno.errorcode[exc.errno]
print(json.dumps({"described": described, "written": written, "error": error}))
"""
    target = tmp_path / "big"
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True,
                          timeout=60, check=True)
    result = json.loads(done.stdout)
    assert result == {"described": {"rlimits": f"RLIMIT_FSIZE {1 << 20}"}, "written": 1 << 20, "error": "EFBIG"}
    assert target.stat().st_size == 1 << 20


@needs_landlock
def test_no_block_device_is_readable_and_a_runner_cannot_open_one(folders: tuple[Path, Path]) -> None:
    # A runner runs as root, and a disk's node opens for its owner whatever capabilities were dropped: with
    # the disk open, a filesystem reader finds every file on it.
    import stat

    assert not [p for p in runner_readable([]) if stat.S_ISBLK(os.stat(p).st_mode)]
    disks = sorted(f"/dev/{name}" for name in os.listdir("/sys/block") if os.path.exists(f"/dev/{name}"))[:3]
    code = f"print(json.dumps([attempt(lambda: os.close(os.open(d, os.O_RDONLY))) for d in {disks!r}]))"
    assert set(json.loads(run_restricted(folders, code))) <= {"EACCES"}


def test_a_task_folder_inside_a_readable_tree_is_refused_not_run(tmp_path: Path) -> None:
    # Landlock grants whole trees: a suite cloned under /usr/local or a Python prefix would be the
    # candidate's to read. The judge refuses to start the candidate's runner there.
    from crucible.harness.scoring import score_session
    from crucible.toolkit.sandbox import exposing
    from crucible.toolkit.task import find_task

    assert exposing("/usr/share/x/tasks/a", ["/usr"]) == "/usr" and exposing("/usrx/a", ["/usr"]) is None
    fixture = find_task("triton2triton/vadd", Path(__file__).parent / "fixtures" / "tasks")
    inside = Path(sys.prefix) / f"crucible-test-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(fixture.root.parent.parent, inside)
        task = find_task("triton2triton/vadd", inside)
        sub = tmp_path / "sub"
        sub.mkdir()
        shutil.copyfile(task.file(task.spec.solution), sub / task.spec.candidate)  # type: ignore[arg-type]
        score, _ = score_session(task, sub, "cpu")
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    assert score.verdict == "infra_error", score
    assert "lies inside" in score.message and "a runner may read" in score.message
