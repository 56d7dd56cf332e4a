"""The package builds, imports, documents itself, and carries the command."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nlg_judge
from nlg_judge import _native


def test_imports_with_its_version_and_public_names():
    assert nlg_judge.__version__ == "0.1.0"
    for name in nlg_judge.__all__:
        assert hasattr(nlg_judge, name), name
    assert issubclass(nlg_judge.NlgJudgeError, Exception)


def test_type_stubs_and_marker_are_installed():
    folder = Path(nlg_judge.__file__).parent
    assert (folder / "py.typed").is_file()
    stub = (folder / "_native.pyi").read_text()
    for name in ("class NativeJudge", "def correlate", "def metric_rows", "class NlgJudgeError"):
        assert name in stub


def test_every_argument_is_documented():
    """help() explains every keyword of the public calls."""
    calls = [
        nlg_judge.Judge.__init__,
        nlg_judge.Judge.compare,
        nlg_judge.Judge.score,
        nlg_judge.Judge.grade,
        nlg_judge.Jury.__init__,
        nlg_judge.Jury.compare,
        nlg_judge.Jury.score,
        nlg_judge.Jury.grade,
        nlg_judge.JuryResult.correlate,
        nlg_judge.Judge.labels,
        nlg_judge.Judge.geval,
        nlg_judge.correlate,
        nlg_judge.metrics.score,
        nlg_judge.dhp.perturb,
        nlg_judge.dhp.score,
        nlg_judge.dhp.analyze,
    ]
    for call in calls:
        doc = inspect.getdoc(call) or inspect.getdoc(getattr(call, "__self__", None)) or ""
        if call is nlg_judge.Judge.__init__:
            doc = inspect.getdoc(nlg_judge.Judge)
        if call is nlg_judge.Jury.__init__:
            doc = inspect.getdoc(nlg_judge.Jury)
        for name in inspect.signature(call).parameters:
            if name in ("self",):
                continue
            assert name in doc, f"{call.__qualname__}: `{name}` is not documented"


def test_option_names_are_the_command_lines(cli):
    """The keywords take the values `--help` lists."""
    names = json.loads(_native.choices())
    help_text = cli("compare", "--help").stdout
    for value in names["design"] + names["rank"] + names["task"]:
        assert value in help_text, value
    assert names["precision"] == ["auto", "f32", "bf16", "int8"]


def test_budget_defaults_are_the_command_lines(cli):
    """Each budget keyword of Judge exists on the command line with the same default."""
    help_text = cli("compare", "--help").stdout
    signature = inspect.signature(nlg_judge.Judge.__init__).parameters
    for name in ("max_batch_tokens", "max_batch_rows", "max_arena_mib"):
        flag = "--" + name.replace("_", "-")
        # The flag's line, the lines of its help (none starting another flag), and
        # the default.
        entry = re.escape(flag) + r"[^\n]*\n(?:(?!\s+--)[^\n]*\n)*?[^\n]*\[default: (\d+)\]"
        found = re.search(entry, help_text)
        assert found, f"{flag} or its default is not in `compare --help`"
        assert signature[name].default == int(found.group(1)), name
        # A negative or fractional budget is refused by name, before anything loads.
        for bad in (-1, 1.5):
            with pytest.raises(ValueError, match=f"{name} must be a whole number"):
                nlg_judge.Judge(progress=False, cache=False, **{name: bad})


def test_the_console_script_is_the_command(cli):
    script = Path(sys.executable).parent / "nlg-judge"
    assert script.is_file(), "pip install did not install the nlg-judge command"
    ours = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert ours.returncode == 0
    assert ours.stdout == cli("--version").stdout
    bad = subprocess.run([str(script), "compare", "--design", "sideways"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid value 'sideways'" in bad.stderr
