"""The README's Python example runs as written after the README's install line.

The example (the first ``python`` block of the README's "Python" section) runs in a fresh
interpreter, from the repository as its relative paths expect, where the optional
dependencies that the install line (the section's ``pip install``) does not ask for
cannot be imported: an example that needs an extra the line does not name fails here,
even though the test environment has everything."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT

PRELUDE = """
import importlib.abc
import sys

ABSENT = {absent!r}


class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed)", name=name)
        return None


sys.meta_path.insert(0, Absent())
"""


def python_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Python\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def install_extras(section: str) -> set:
    """The extras the section's install line asks for (`pip install './python[a,b]'`)."""
    line = next(l for l in section.splitlines() if l.startswith("pip install"))
    match = re.fullmatch(r"pip install '?\./python(?:\[([a-z,\s]*)\])?'?", line.strip())
    assert match, f"not an install line of ./python: {line}"
    return {e.strip() for e in (match.group(1) or "").split(",") if e.strip()}


def optional_modules() -> dict:
    """pyproject.toml's extras: name -> the top-level modules of their requirements."""
    extras = {}
    in_table = False
    for line in (ROOT / "python" / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            in_table = line.strip() == "[project.optional-dependencies]"
            continue
        if in_table and "=" in line:
            name, requirements = line.split("=", 1)
            extras[name.strip()] = {
                re.split(r"[<>=!~\[ ]", r)[0].replace("-", "_").lower()
                for r in re.findall(r'"([^"]+)"', requirements)
            }
    return extras


def absent_after(extras: set) -> set:
    """Modules of the extras not installed by a line asking for `extras`."""
    table = optional_modules()
    unknown = extras - set(table)
    assert not unknown, f"the install line names extras pyproject.toml lacks: {unknown}"
    wanted = set().union(*(table[e] for e in extras))
    return set().union(*table.values()) - wanted


def run_without(absent: set, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE.format(absent=sorted(absent)) + code],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_the_readme_example_runs_after_the_readme_install_line():
    section = python_section()
    extras = install_extras(section)
    absent = absent_after(extras)
    assert "tqdm" in absent and "pytest" in absent, absent
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "no python block in the README's Python section"
    process = run_without(absent, block.group(1))
    assert process.returncode == 0, process.stderr
    # It printed the ranked table of the example's five candidates.
    for candidate in ("good", "terse", "details-wrong-order", "off-topic", "incoherent"):
        assert candidate in process.stdout, process.stdout


def test_without_pandas_a_data_frame_says_which_extra_brings_it():
    process = run_without(
        {"pandas"}, "from nlg_judge import _results\n_results._pandas()\n"
    )
    assert process.returncode != 0
    assert "ModuleNotFoundError: DataFrames need pandas" in process.stderr, process.stderr
    assert "pip install './python[pandas]'" in process.stderr, process.stderr
    # A line without the extra would leave the example without pandas.
    assert "pandas" in absent_after(set())
