"""Packaging and set-up: every source folder is installed, scripts/setup.sh says what it does, the README
names what a newcomer types."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_folder_of_sources_or_headers_is_a_listed_package() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {ROOT / path: name for name, path in tool["package-dir"].items()}
    listed = set(tool["packages"])
    found = set()
    for top, name in folders.items():
        for folder in [top, *(p for p in top.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
            if any(f.suffix in (".py", ".h") for f in folder.iterdir()):
                found.add(".".join([name, *folder.relative_to(top).parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "these packages have no folder"


def test_every_header_folder_ships_its_headers() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = tool["package-data"]
    for folder in (ROOT / "toolkit/include").rglob("*.h"):
        package = ".".join(["crucible.toolkit.include", *folder.parent.relative_to(ROOT / "toolkit/include").parts])
        assert "*.h" in data.get(package, []), f"{package} ships no *.h"


FAKE_PYTHON = """#!/bin/sh
# python3 for the test: `--version`, and `-m venv DIR` making a pip that talks a lot and a crucible.
if [ "$1" = "--version" ]; then echo "Python 3.11.7"; exit 0; fi
mkdir -p "$3/bin"
cat > "$3/bin/pip" <<'PIP'
#!/bin/sh
echo "Collecting noise-from-pip"
echo "BuildBackendWarning: a page of setuptools noise" >&2
case " $* " in *" $FAIL_ON "*) echo "ERROR: pip failed on $FAIL_ON" >&2; exit 1;; esac
exit 0
PIP
printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/crucible"
chmod +x "$3/bin/pip" "$3/bin/crucible"
"""


def run_setup(tmp_path: Path, *args: str, fail_on: str = "") -> subprocess.CompletedProcess:
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/setup.sh", repo / "scripts/setup.sh")
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAIL_ON": fail_on}
    return subprocess.run(["bash", str(repo / "scripts/setup.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_setup_says_each_step_in_one_line_and_keeps_pips_output_in_a_log(tmp_path: Path) -> None:
    done = run_setup(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["setup"] * 5 + ["set up"]
    assert "torch 2.13.0" in lines[2] and "crucible (editable)" in lines[3]
    assert "noise" not in done.stdout
    assert "a page of setuptools noise" in (tmp_path / "repo/.venv/setup.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_failing_setup_step_says_which_and_shows_the_end_of_the_log(tmp_path: Path) -> None:
    done = run_setup(tmp_path, "--keep-torch", fail_on="-e")
    assert done.returncode == 1
    assert "keeping the installed torch" in done.stdout
    assert "failed: installing crucible (editable)" in done.stderr and "ERROR: pip failed on -e" in done.stderr
    assert "is ready" not in done.stdout


def test_every_named_suite_is_in_the_readme() -> None:
    from crucible.harness.suites import load_suites

    readme = (ROOT / "README.md").read_text()
    for name in load_suites(ROOT / "tasks"):
        assert f"`{name}`" in readme, f"suite {name} (tasks/suites.toml) is not in the README"
