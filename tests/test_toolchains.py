"""Toolchains: CUDA and HIP through nvcc (compile only, no GPU), Triton through its interpreter and
triton.compile for sm_90. Test kernels live in tests/kernels/, one folder per candidate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crucible.toolkit.toolchains import TOOLCHAINS, BuildTarget, get_toolchain
from crucible.toolkit.toolchains.cuda import CudaToolchain, parse_diagnostics, parse_ptxas
from crucible.toolkit.toolchains.hip import HipToolchain, parse_amdgpu_remarks

KERNELS = Path(__file__).parent / "kernels"
SM90 = BuildTarget(backend="cpu", arch="sm_90")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not on PATH")


def by_name(kernels: list) -> dict:
    return {k.name.split("(")[0]: k for k in kernels}


# --- the interface -----------------------------------------------------------------------------------


def test_each_language_has_one_registered_toolchain():
    from crucible.toolkit.task import SOURCE_SUFFIX

    assert set(TOOLCHAINS) == {"cuda", "hip", "triton", "cute", "tilelang"} == set(SOURCE_SUFFIX)
    assert all(get_toolchain(lang).language == lang for lang in TOOLCHAINS)
    with pytest.raises(ValueError, match="no toolchain for language 'fortran'"):
        get_toolchain("fortran")


def test_every_toolchain_answers_the_whole_protocol_so_callers_never_test_a_language_name():
    for chain in TOOLCHAINS.values():
        assert chain.loader in ("python_module", "shared_library")
        assert all(isinstance(getattr(chain, f), bool) for f in ("runs_on_cpu", "traced_build", "stub_runs"))
        assert chain.available() is None or isinstance(chain.available(), str)
        assert callable(chain.compile_configs)
    for lang in ("cuda", "hip", "triton"):  # build compiles these (or only a run can): no offline compile
        assert get_toolchain(lang).compile_configs(None, Path("."), "kernel") is None  # type: ignore[arg-type]
        assert get_toolchain(lang).available() is None and not get_toolchain(lang).stub_runs


# --- CUDA --------------------------------------------------------------------------------------------


@needs_nvcc
def test_cuda_build_reports_registers_and_shared_memory_for_each_kernel(tmp_path):
    result = CudaToolchain().build(KERNELS / "cuda_good", "kernel.cu", SM90, tmp_path)
    assert result.ok, result.log
    kernels = by_name(result.kernels)
    assert set(kernels) == {"vector_add", "block_sum"}
    assert kernels["vector_add"].name == "vector_add(float const*, float const*, float*, long)"  # demangled
    assert all(k.registers and k.registers > 0 for k in kernels.values())
    assert kernels["block_sum"].shared_bytes == 256 * 4
    assert kernels["vector_add"].shared_bytes == 0
    assert kernels["vector_add"].spill_stores == 0
    assert Path(result.artifact).is_file() and result.artifact.endswith(".so")
    assert {"-shared", "-arch=sm_90", "-lineinfo", "-Xptxas", "-v"} <= set(result.command)
    assert not result.cached and result.diagnostics == []


@needs_nvcc
def test_cuda_compile_error_gives_a_diagnostic_with_file_line_and_nvccs_words(tmp_path):
    result = CudaToolchain().build(KERNELS / "cuda_error", "kernel.cu", SM90, tmp_path)
    assert not result.ok and result.artifact is None
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert len(errors) == 1
    assert (errors[0].file, errors[0].line) == ("kernel.cu", 6)
    assert 'identifier "factor" is undefined' in errors[0].message
    assert "factor" in result.log


@needs_nvcc
def test_cuda_kernel_that_spills_reports_spill_bytes(tmp_path):
    result = CudaToolchain().build(KERNELS / "cuda_spill", "kernel.cu", SM90, tmp_path)
    assert result.ok, result.log
    (kernel,) = result.kernels
    assert kernel.registers is not None and kernel.registers <= 32  # __launch_bounds__(1024, 2)
    assert kernel.spill_stores > 0 and kernel.spill_loads > 0 and kernel.stack_bytes > 0


@needs_nvcc
def test_cuda_rebuild_of_unchanged_source_is_cached_and_an_edited_header_is_not(tmp_path):
    src = shutil.copytree(KERNELS / "cuda_good", tmp_path / "src")
    toolchain = CudaToolchain(cache_dir=tmp_path / "cache")
    first = toolchain.build(src, "kernel.cu", SM90, tmp_path / "out")
    again = toolchain.build(src, "kernel.cu", SM90, tmp_path / "out")
    assert first.ok and not first.cached
    assert again.cached and again.seconds < 0.1
    assert again.kernels == first.kernels and again.artifact == first.artifact
    (src / "common.cuh").write_text("#pragma once\nconstexpr int kBlock = 128;\n")
    edited = toolchain.build(src, "kernel.cu", SM90, tmp_path / "out")
    assert not edited.cached and edited.artifact != first.artifact
    assert by_name(edited.kernels)["block_sum"].shared_bytes == 128 * 4


@needs_nvcc
def test_a_file_the_source_includes_changes_the_cache_key_whatever_its_name(tmp_path):
    # A key over some suffixes only handed one snapshot another's library: `#include "body.inc"` (or .c, or
    # no suffix at all) with different contents got the first build back.
    src = shutil.copytree(KERNELS / "cuda_good", tmp_path / "src")
    kernel = src / "kernel.cu"
    kernel.write_text(kernel.read_text().replace('#include "common.cuh"', '#include "common.cuh"\n#include "marker"'))
    toolchain = CudaToolchain(cache_dir=tmp_path / "cache")
    builds = []
    for marker in ("first", "second"):
        (src / "marker").write_text(f'extern "C" const char crucible_marker_{marker}[] = "{marker}";\n')
        builds.append(toolchain.build(src, "kernel.cu", SM90, tmp_path / "out"))
    first, second = builds
    assert first.ok and second.ok, second.log
    assert not second.cached and second.artifact != first.artifact
    assert b"crucible_marker_second" in Path(second.artifact).read_bytes()  # type: ignore[arg-type]


@needs_nvcc
def test_compile_errors_are_cached_too(tmp_path):
    first = CudaToolchain().build(KERNELS / "cuda_error", "kernel.cu", SM90, tmp_path)
    again = CudaToolchain().build(KERNELS / "cuda_error", "kernel.cu", SM90, tmp_path)
    assert again.cached and again.diagnostics == first.diagnostics


@needs_nvcc
def test_exploit_including_the_hidden_solution_from_outside_the_source_dir_is_refused(tmp_path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "solution.cu").write_text('extern "C" int entry() { return 0; }\n')
    src = tmp_path / "workspace"
    src.mkdir()
    (src / "kernel.cu").write_text('#include "../task/solution.cu"\n')
    result = CudaToolchain().build(src, "kernel.cu", SM90, tmp_path / "out")
    assert not result.ok and result.artifact is None and not result.cached
    assert "outside its source directory" in result.diagnostics[0].message
    assert "return 0" not in result.log


@needs_nvcc
def test_missing_header_gives_a_diagnostic_at_the_include_line(tmp_path):
    (tmp_path / "kernel.cu").write_text('// line 1\n#include "tiles.cuh"\n')
    result = CudaToolchain().build(tmp_path, "kernel.cu", SM90, tmp_path / "out")
    assert not result.ok
    assert (result.diagnostics[0].file, result.diagnostics[0].line) == ("kernel.cu", 2)
    assert "tiles.cuh" in result.diagnostics[0].message


def test_missing_nvcc_gives_a_diagnostic_that_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    result = CudaToolchain().build(KERNELS / "cuda_good", "kernel.cu", SM90, tmp_path)
    assert not result.ok
    assert "install the CUDA toolkit" in result.diagnostics[0].message


def test_missing_candidate_file_is_a_diagnostic(tmp_path):
    result = CudaToolchain().build(tmp_path, "kernel.cu", SM90, tmp_path / "out")
    assert not result.ok and "kernel.cu not found" in result.diagnostics[0].message


def test_cuda_refuses_an_amd_target(tmp_path):
    result = CudaToolchain().build(KERNELS / "cuda_good", "kernel.cu",
                                   BuildTarget(backend="rocm", arch="gfx942"), tmp_path)
    assert not result.ok and "write HIP for AMD GPUs" in result.diagnostics[0].message


def test_ptxas_output_of_older_toolkits_parses_too():
    log = textwrap.dedent("""\
        ptxas info    : Compiling entry function '_Z4tileILi64EEvPfS0_' for 'sm_80'
        ptxas info    : Function properties for _Z4tileILi64EEvPfS0_
            16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
        ptxas info    : Used 255 registers, 16384 bytes smem, 368 bytes cmem[0]
        ptxas info    : Function properties for _Z6helperv
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        """)
    (kernel,) = parse_ptxas(log)
    assert kernel.name in ("void tile<64>(float*, float*)", "_Z4tileILi64EEvPfS0_")
    assert (kernel.registers, kernel.shared_bytes, kernel.spill_stores, kernel.spill_loads, kernel.stack_bytes) == (
        255, 16384, 8, 12, 16)


def test_host_compiler_and_ptxas_errors_become_diagnostics(tmp_path):
    log = textwrap.dedent(f"""\
        {tmp_path}/sub/helper.h:3:7: error: expected ';' before 'int'
        kernel.cu(12): warning #177-D: variable "x" was declared but never referenced
        ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)
        """)
    diags = parse_diagnostics(log, tmp_path, "kernel.cu")
    assert [(d.file, d.line, d.column, d.severity) for d in diags] == [
        ("sub/helper.h", 3, 7, "error"), ("kernel.cu", 12, None, "warning"), ("kernel.cu", None, None, "error")]
    assert "too much shared data" in diags[2].message


# --- HIP ---------------------------------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("folder", ["hip_good", "hip_api"])
def test_hip_source_compiles_through_nvcc_with_the_hip_on_cuda_header(tmp_path, folder):
    result = HipToolchain().build(KERNELS / folder, "kernel.hip", BuildTarget(backend="cuda", arch="sm_90"),
                                  tmp_path)
    assert result.ok, result.log
    assert result.kernels and all(k.registers > 0 for k in result.kernels)
    assert "-x" in result.command and any(c.endswith("include") for c in result.command)
    if folder == "hip_good":
        assert by_name(result.kernels)["row_sum"].shared_bytes == 8 * 4


@needs_nvcc
def test_hip_rebuild_is_cached(tmp_path):
    first = HipToolchain().build(KERNELS / "hip_good", "kernel.hip", SM90, tmp_path)
    again = HipToolchain().build(KERNELS / "hip_good", "kernel.hip", SM90, tmp_path)
    assert first.ok and again.cached and again.kernels == first.kernels


@pytest.mark.skipif(shutil.which("hipcc") is not None, reason="ROCm is installed here")
def test_hip_for_an_amd_gpu_without_rocm_says_to_install_it(tmp_path):
    result = HipToolchain().build(KERNELS / "hip_good", "kernel.hip", BuildTarget(backend="rocm", arch="gfx942"),
                                  tmp_path)
    assert not result.ok and "install ROCm" in result.diagnostics[0].message


def test_amdgpu_resource_remarks_parse_into_kernel_resources():
    log = textwrap.dedent("""\
        kernel.hip:5:1: remark: Function Name: _Z7row_sumPKfPfi [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     SGPRs: 18 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     VGPRs: 24 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     AGPRs: 0 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     ScratchSize [bytes/lane]: 16 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     VGPRs Spill: 3 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:5:1: remark:     LDS Size [bytes/block]: 1024 [-Rpass-analysis=kernel-resource-usage]
        """)
    (kernel,) = parse_amdgpu_remarks(log)
    assert kernel.name.startswith("row_sum") or kernel.name == "_Z7row_sumPKfPfi"
    assert (kernel.registers, kernel.shared_bytes, kernel.stack_bytes, kernel.spill_stores) == (24, 1024, 16, 12)


# --- Triton: the parent side ---------------------------------------------------------------------------


def test_triton_syntax_error_gives_a_diagnostic_with_line(tmp_path):
    shutil.copy(KERNELS / "triton_syntax" / "kernel.py.txt", tmp_path / "kernel.py")
    result = get_toolchain("triton").build(tmp_path, "kernel.py", SM90, tmp_path)
    assert not result.ok
    (diag,) = result.diagnostics
    assert (diag.file, diag.line) == ("kernel.py", 9)
    assert "expected ':'" in diag.message


def test_triton_build_in_the_parent_never_imports_the_candidate(tmp_path):
    marker = tmp_path / "imported"
    (tmp_path / "kernel.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = get_toolchain("triton").build(tmp_path, "kernel.py", SM90, tmp_path)
    assert result.ok and result.artifact == str(tmp_path / "kernel.py")
    assert not marker.exists()


# --- Triton: the worker side, in a fresh interpreter (TRITON_INTERPRET is read at @jit time) -----------

_TRACE_SCRIPT = """
import json, os, sys
from pathlib import Path
from crucible.toolkit.toolchains import BuildTarget
from crucible.toolkit.toolchains.triton import compile_records, import_candidate, record_launches, trace_build
kernels, interpret = Path(sys.argv[1]), os.environ.get("TRITON_INTERPRET") == "1"
sys.path.insert(0, str(kernels))
import torch, triton_inputs
target = BuildTarget(backend="cpu", arch="sm_90")
out = {}
for name, folder, entry, kw in [("vadd", "triton_vadd", "vector_add", {}),
                                ("mm32", "triton_matmul", "matmul", {"dtype": "float32"}),
                                ("mm16", "triton_matmul", "matmul", {"dtype": "float16"})]:
    module = import_candidate(kernels / folder / "kernel.py")
    args = getattr(triton_inputs, entry)(**kw)
    records = record_launches(lambda: getattr(module, entry)(*args), launch=interpret)
    res, diags = compile_records(records, target, source_dir=kernels / folder)
    ref = (args[0].float() + args[1].float()) if entry == "vector_add" else args[0].float() @ args[1].float()
    out[name] = {"records": [{"name": r.name, "signature": r.signature, "constexprs": r.constexprs,
                              "launches": r.launches} for r in records],
                 "kernels": [k.model_dump() for k in res], "diagnostics": [d.model_dump() for d in diags],
                 "error": float((args[2].float() - ref).abs().max())}
for folder, entry in [("triton_bad_call", "exp2x"), ("triton_softmax", "softmax")]:
    out[folder] = trace_build({"source_dir": str(kernels / folder), "candidate": "kernel.py", "entry": entry,
                               "inputs": f"{kernels}/triton_inputs.py:{entry}", "target": target.model_dump(),
                               "interpret": interpret, "launch": interpret})
print("RESULT" + json.dumps(out))
"""


def _trace(interpret: bool, cache: Path) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1" if interpret else "0", "TRITON_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", _TRACE_SCRIPT, str(KERNELS)], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    return _trace(True, tmp_path_factory.mktemp("triton-cache"))


@pytest.fixture(scope="module")
def traced_without_running(tmp_path_factory):
    return _trace(False, tmp_path_factory.mktemp("triton-cache"))


def test_record_launches_sees_kernel_types_and_constexprs_under_the_interpreter(interpreted):
    (vadd,) = interpreted["vadd"]["records"]
    assert vadd["name"] == "add_kernel"
    assert vadd["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                 "BLOCK": "constexpr"}
    assert vadd["constexprs"] == {"BLOCK": 1024}
    assert interpreted["vadd"]["error"] == 0.0  # the interpreter really ran the kernel
    (mm16,) = interpreted["mm16"]["records"]
    assert mm16["signature"]["a_ptr"] == "*fp16" and mm16["constexprs"]["BLOCK_K"] == 32


@pytest.mark.parametrize("case", ["vadd", "mm32", "mm16"])
def test_compile_records_reports_registers_for_sm90_from_interpreted_kernels(interpreted, case):
    (kernel,) = interpreted[case]["kernels"]
    assert interpreted[case]["diagnostics"] == []
    assert kernel["registers"] > 0 and kernel["spill_stores"] == 0
    if case.startswith("mm"):
        assert kernel["shared_bytes"] > 0  # tl.dot stages its tiles through shared memory
        assert interpreted[case]["error"] < 0.1


@pytest.mark.parametrize("case", ["vadd", "mm32", "mm16"])
def test_record_launches_without_running_gives_the_same_resources(interpreted, traced_without_running, case):
    assert traced_without_running[case]["kernels"] == interpreted[case]["kernels"]


@pytest.mark.parametrize("mode", ["interpreted", "traced_without_running"])
def test_triton_compile_error_gives_a_diagnostic_at_the_failing_line_and_its_call_site(mode, request):
    result = request.getfixturevalue(mode)["triton_bad_call"]
    assert not result["ok"]
    error, call_site = result["diagnostics"][:2]
    assert (error["file"], error["line"], error["severity"]) == ("kernel.py", 11, "error")
    assert "fast_exp" in error["message"]
    assert (call_site["line"], call_site["severity"]) == (17, "note")


def test_trace_build_compiles_kernels_that_use_triton_languages_own_jit_functions(interpreted):
    result = interpreted["triton_softmax"]
    assert result["ok"], result["diagnostics"]
    (kernel,) = result["kernels"]
    assert kernel["name"].startswith("softmax_kernel(*fp32, *fp32, i32, BLOCK=128)")
    assert kernel["registers"] > 0


BUILD_WITH_A_MEMORY_LIMIT = """
import resource, sys
from pathlib import Path
from crucible.toolkit.toolchains import BuildTarget
from crucible.toolkit.toolchains import cuda
cuda.BUILD_MEMORY_LIMIT_BYTES = int(sys.argv[3])
result = cuda.CudaToolchain(cache_dir=Path(sys.argv[2])).build(Path(sys.argv[1]), "kernel.cu",
                                                              BuildTarget(backend="cpu", arch="sm_90"), Path(sys.argv[2]))
print(result.ok, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10)
"""


@needs_nvcc
def test_a_compiler_process_cannot_hold_more_memory_than_its_limit(tmp_path):
    # An assembler told to .incbin a large file many times holds every copy: gigabytes on the host of the
    # judges, before the file-size limit stops its output.
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "big.bin", "wb") as f:
        f.truncate(400 << 20)  # sparse: costs no disk
    (src / "kernel.cu").write_text('asm(".incbin \\"big.bin\\"\\n.incbin \\"big.bin\\"\\n.incbin \\"big.bin\\"\\n.incbin \\"big.bin\\"");\n'
                                   'extern "C" int entry() { return 0; }\n')
    done = subprocess.run([sys.executable, "-c", BUILD_WITH_A_MEMORY_LIMIT, str(src), str(tmp_path / "out"), str(1 << 30)],
                          capture_output=True, text=True, timeout=600, check=True)
    ok, peak_mib = done.stdout.split()
    assert ok == "False"
    assert int(peak_mib) < 1100, f"a compiler process peaked at {peak_mib} MiB under a 1 GiB limit"
