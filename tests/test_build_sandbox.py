"""The build of a CUDA/HIP candidate runs its compiler in a sandbox (toolchains/cuda.py, sandbox_exec.py): the
source decides what the compiler reads and how much it writes, so it may read only the system, the toolkits
and its own folder, and write only files up to BUILD_FILE_LIMIT_BYTES in its cache entry. The exploits are
the red team's (tests/redteam/leaks/cuda_incbin_solution.cu, tests/redteam/state/cuda_huge_object.cu)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crucible.toolkit import sandbox_exec
from crucible.toolkit.sandbox_exec import LAUNCH_FAILED, MARK, landlock_abi
from crucible.toolkit.toolchains import BuildTarget
from crucible.toolkit.toolchains import cuda as cuda_chain
from crucible.toolkit.toolchains.cuda import (
    BUILD_FILE_LIMIT_BYTES,
    LAUNCHER,
    CudaToolchain,
    compiler_readable,
)
from crucible.toolkit.toolchains.hip import INCLUDE_DIR, HipToolchain

REPO = Path(__file__).resolve().parent.parent
RMSNORM = REPO / "tasks" / "cuda2cuda" / "rmsnorm"
HIDDEN = RMSNORM / "hidden.toml"
HIP_TASK = sorted((REPO / "tasks" / "hip2hip").glob("*/solution.hip"))[0].parent
SM90 = BuildTarget(backend="cpu", arch="sm_90")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not on PATH")
needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="no Landlock on this kernel")


def secrets() -> list[str]:
    """Distinctive lines of the hidden configs: none may reach a library or a log."""
    return [ln.strip() for ln in HIDDEN.read_text().splitlines() if len(ln.strip()) >= 24]


def assert_no_secret(result, where: str) -> None:
    shown = "\n".join([result.log, *(d.message for d in result.diagnostics)])
    assert not [s for s in secrets() if s in shown], f"{where}: the hidden configs reached the build's words"
    if result.artifact:
        data = Path(result.artifact).read_bytes()
        assert not [s for s in secrets() if s.encode() in data], f"{where}: the library holds the hidden configs"


def build(tmp_path: Path, source: str, name: str = "kernel.cu"):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / name).write_text(source)
    return CudaToolchain().build(src, name, SM90, tmp_path / "builds")


# --- reading the task's files through the compiler -------------------------------------------------


@needs_nvcc
@needs_landlock
def test_exploit_incbin_of_the_hidden_configs_does_not_build(tmp_path: Path) -> None:
    result = build(tmp_path, f'''
asm(".section .rodata\\n.global leaked\\nleaked:\\n.incbin \\"{HIDDEN}\\"\\n.byte 0\\n.previous\\n");
extern "C" const char leaked[];
extern "C" const char* entry() {{ return leaked; }}
''')
    assert not result.ok and result.artifact is None
    assert_no_secret(result, ".incbin")


@needs_nvcc
@needs_landlock
def test_exploit_has_include_probe_for_the_suite_is_refused_as_a_read_outside_the_source_dir(
        tmp_path: Path) -> None:
    result = build(tmp_path, f'''
#if __has_include("{HIDDEN}")
#define FOUND 1
#endif
extern "C" int entry() {{ return 0; }}
''')
    assert not result.ok and not result.cached
    assert "outside its source directory" in result.diagnostics[0].message
    assert str(HIDDEN) in result.diagnostics[0].message
    assert_no_secret(result, "__has_include")


@needs_nvcc
@needs_landlock
@pytest.mark.parametrize("guard", ["", "__CUDA_ARCH__"])
def test_exploit_include_of_the_hidden_configs_by_absolute_path_is_refused(tmp_path: Path, guard: str) -> None:
    """A device-only include (`#ifdef __CUDA_ARCH__`) is one the host preprocessor's check never sees."""
    text = f'#include "{HIDDEN}"\n'
    if guard:
        text = f"#ifdef {guard}\n{text}#endif\n"
    result = build(tmp_path, text + 'extern "C" int entry() { return 0; }\n')
    assert not result.ok and result.artifact is None
    assert "outside its source directory" in result.diagnostics[0].message
    assert_no_secret(result, f"#include (guard {guard or 'none'})")


# --- writing through the compiler ------------------------------------------------------------------


@needs_nvcc
def test_exploit_huge_static_array_fails_with_the_size_limit_message(tmp_path: Path) -> None:
    over = (BUILD_FILE_LIMIT_BYTES >> 20) + 44
    result = build(tmp_path, f'char ballast[{over} << 20] = {{1}};\nextern "C" int entry() {{ return ballast[7]; }}\n')
    assert not result.ok and result.artifact is None
    (diag,) = result.diagnostics
    assert diag.message.startswith(f"the built library would exceed {BUILD_FILE_LIMIT_BYTES >> 20} MiB;")
    left = [p for p in (tmp_path / "builds").rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    assert left == [], "the partial objects must not stay in the build cache"
    again = build(tmp_path, (tmp_path / "src" / "kernel.cu").read_text())
    assert again.cached and again.diagnostics == result.diagnostics  # the same source fails the same way


# --- honest builds ---------------------------------------------------------------------------------


@needs_nvcc
def test_the_rmsnorm_expert_solution_builds_in_the_sandbox_and_reports_registers(tmp_path: Path) -> None:
    result = CudaToolchain().build(RMSNORM, "solution.cu", SM90, tmp_path)
    assert result.ok, result.log[-3000:]
    assert result.kernels and all(k.registers and k.registers > 0 for k in result.kernels)
    assert ("without a filesystem sandbox" in result.log) == (landlock_abi() < 1)
    assert sorted(p.name for p in Path(result.artifact).parent.iterdir()) == ["libsolution.so", "result.json"]


@needs_nvcc
def test_a_hip_solution_builds_with_nvcc_through_our_headers_in_the_sandbox(tmp_path: Path) -> None:
    result = HipToolchain().build(HIP_TASK, "solution.hip", SM90, tmp_path)
    assert result.ok, result.log[-3000:]
    assert result.kernels and all(k.registers and k.registers > 0 for k in result.kernels)


@needs_nvcc
def test_without_landlock_the_build_runs_as_before_and_its_log_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cuda_chain, "landlock_abi", lambda: 0)
    result = build(tmp_path, "__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
    assert result.ok, result.log[-3000:]
    first = result.log.splitlines()[0]
    assert first.startswith("crucible: the compiler ran without a filesystem sandbox (no Landlock")
    assert [k.registers for k in result.kernels]


# --- the allow-list and the launcher ---------------------------------------------------------------


def test_the_compiler_may_read_the_toolkits_and_its_source_but_not_the_suite_proc_or_home(tmp_path: Path) -> None:
    readable = compiler_readable(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc", tmp_path, [INCLUDE_DIR])
    assert str(tmp_path) in readable and str(INCLUDE_DIR) in readable
    assert "/usr" in readable
    for path in readable:
        for forbidden in (REPO / "tasks", REPO, Path("/proc"), Path("/sys"), Path.home(), Path("/tmp")):
            assert not forbidden.is_relative_to(path), f"{path} opens {forbidden} to the compiler"
        assert not Path(path).is_relative_to("/proc") and not Path(path).is_relative_to(REPO / "tasks")


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), *args], capture_output=True, text=True,
                          timeout=60, check=False)


@needs_landlock
def test_the_launcher_lets_the_command_read_and_write_only_what_it_was_given(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "in" / "ok.txt").write_text("fine")
    (tmp_path / "secret.txt").write_text("LEAKED")
    system = [a for p in ("/usr", "/lib", "/lib64", "/bin") for a in ("--read", p)]
    done = launch(*system, "--read", str(tmp_path / "in"), "--write", str(tmp_path / "out"), "--",
                  "/bin/sh", "-c", f"cat {tmp_path}/in/ok.txt > {tmp_path}/out/copy; cat {tmp_path}/secret.txt; "
                  f"echo x > {tmp_path}/in/new")
    assert done.returncode != 0 and "LEAKED" not in done.stdout
    assert (tmp_path / "out" / "copy").read_text() == "fine"
    assert not (tmp_path / "in" / "new").exists()


def test_the_launcher_caps_the_size_of_a_file_the_command_writes(tmp_path: Path) -> None:
    done = launch("--rlimit", "FSIZE=4096", "--no-landlock", "--", "/bin/sh", "-c",
                  f"head -c 100000 /dev/zero > {tmp_path}/big")
    assert done.returncode != 0 and "File too large" in done.stderr
    assert (tmp_path / "big").stat().st_size == 4096


def test_the_launcher_refuses_to_run_what_it_cannot_sandbox() -> None:
    done = launch("--rlimit", "NOPE=1", "--", "true")
    assert done.returncode == LAUNCH_FAILED and done.stderr.startswith(MARK)
    assert "unknown rlimit" in done.stderr


def test_the_launcher_starts_without_site_packages() -> None:
    """It is run as a plain script with `-I -S` (tens of ms): only the standard library may be imported."""
    code = ("import sys; sys.argv = ['x', '--', 'true']; import runpy; "
            f"runpy.run_path({str(LAUNCHER)!r}, run_name='not_main'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'crucible')))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert sandbox_exec.__file__ == str(LAUNCHER)
