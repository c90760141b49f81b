"""The report's HTML page: self-contained, escaped, and rendered for real in headless Chromium.

Chromium comes from Debian (`apt-get install -y chromium`); without it the browser tests are skipped.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_report import SESSIONS, SOFTMAX, passed, usage, write_store

from crucible.harness.report import Report, report_for
from crucible.harness.report_html import report_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
# Headless on a machine with no network and no screen (docs: env/machines/python.md).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]

EVIL_MODEL = "<script>alert(1)</script>"
EVIL_TASK = 'triton2triton/x"><img src=x onerror=alert(2)>'
EVIL_FLAG = "<iframe src=javascript:alert(3)></iframe>"


@pytest.fixture
def report(tmp_path: Path) -> Report:
    return report_for(write_store(tmp_path / "run"))


@pytest.fixture
def evil_report(tmp_path: Path) -> Report:
    sessions = [
        (("codex", EVIL_MODEL), EVIL_TASK, 0, "done", "finished", passed(1.5, [EVIL_FLAG]), usage(0.3)),
        (("codex", "plain"), SOFTMAX, 0, "done", "finished", passed(1.2), usage(0.2)),
    ]
    return report_for(write_store(tmp_path / "evil", sessions))  # type: ignore[arg-type]


class Dom(HTMLParser):
    """Elements (tag, attributes) and the text of each element with a class, from a page or a DOM dump."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        self._open.append(a.get("class", ""))

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1]:
            self.texts.setdefault(self._open[-1], []).append(data)

    def count(self, tag: str, cls: str) -> int:
        return sum(t == tag and cls in a.get("class", "").split() for t, a in self.elements)


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    # Chromium logs every console message, CSP violations and uncaught errors included, as ":CONSOLE" lines.
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def write_page(report: Report, tmp_path: Path) -> Path:
    page = tmp_path / "report.html"
    page.write_text(report_html(report), encoding="utf-8")
    return page


def test_the_page_is_self_contained_and_forbids_scripts(report: Report) -> None:
    html = report_html(report)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script" not in html.lower()
    dom = Dom(html)
    assert not [a for _, a in dom.elements if {"src", "href"} & set(a)]  # nothing loaded from anywhere
    assert html.count("<svg") == 2


def test_model_names_task_ids_and_flags_from_agents_are_escaped(evil_report: Report) -> None:
    html = report_html(evil_report)
    assert "<script" not in html and "<img" not in html and "<iframe" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;iframe src=javascript:alert(3)&gt;&lt;/iframe&gt;" in html
    dom = Dom(html)
    assert not [a for _, a in dom.elements if any(k.startswith("on") for k in a)]
    assert f"codex/{EVIL_MODEL}" in dom.texts["legend-label"]
    bars = [a for t, a in dom.elements if t == "rect" and a.get("class") == "bar"]
    assert EVIL_TASK in {a["data-task"] for a in bars}  # an attribute value, quotes and all


def test_a_report_with_no_sessions_still_renders(tmp_path: Path) -> None:
    html = report_html(report_for(write_store(tmp_path / "empty", [])))
    assert html.count("<svg") == 2 and "none" in html


@needs_chromium
def test_chromium_renders_one_bar_per_task_and_entrant_that_passed_and_one_point_per_costed_session(
        report: Report, tmp_path: Path) -> None:
    proc = chromium(write_page(report, tmp_path), tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Dom(proc.stdout)
    entrants = [e.entrant for e in report.entrants]
    passing = [t for t in report.tasks if t.passing]
    assert dom.count("rect", "bar") == len(passing) == 4
    assert dom.count("text", "nopass") == len(report.tasks) - len(passing) == 1  # codex on silu: flagged
    costed = [p for p in report.points if p.cost_usd is not None]
    assert dom.count("circle", "point") == len(costed) == 8
    assert dom.count("circle", "fail") == 2  # the incorrect and the flagged session
    assert dom.texts["legend-label"] == entrants * 2  # one legend per plot
    assert dom.count("line", "baseline-line") == 2
    for cls in ("results", "usage", "categories", "tasks", "infra", "flagged", "unscored"):
        assert dom.count("table", cls) == 1, cls
    assert "speedup (geomean over passing sessions, log scale)" in dom.texts["axis-label"]
    assert "cost per session (USD)" in dom.texts["axis-label"]
    assert console_lines(proc.stderr) == []


@needs_chromium
def test_chromium_takes_a_screenshot_of_the_page(report: Report, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = chromium(write_page(report, tmp_path), tmp_path, f"--screenshot={shot}", "--window-size=1280,2400",
                    "--hide-scrollbars")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1280, 2400)
    assert len(png) > 30_000  # a blank page compresses to a few kB
    assert console_lines(proc.stderr) == []


@needs_chromium
def test_injected_markup_stays_text_in_the_browser(evil_report: Report, tmp_path: Path) -> None:
    proc = chromium(write_page(evil_report, tmp_path), tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Dom(proc.stdout)
    assert not [t for t, _ in dom.elements if t in ("script", "img", "iframe")]
    assert not [a for _, a in dom.elements if any(k.startswith("on") for k in a)]
    assert f"codex/{EVIL_MODEL}" in dom.texts["legend-label"]
    assert console_lines(proc.stderr) == []


@needs_chromium
def test_the_console_check_sees_errors_and_blocked_scripts(tmp_path: Path) -> None:
    """The control for the checks above: a page that logs an error, and one whose script CSP blocks."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><p>x</p><script>console.error('boom')</script>")
    assert any("boom" in line for line in console_lines(chromium(bad, tmp_path, "--dump-dom").stderr))
    blocked = tmp_path / "blocked.html"
    blocked.write_text(report_html(report_for(write_store(tmp_path / "run", SESSIONS[:1])))
                       .replace("</body>", "<script>1</script></body>"))
    assert any("Content Security Policy" in line
               for line in console_lines(chromium(blocked, tmp_path, "--dump-dom").stderr))

