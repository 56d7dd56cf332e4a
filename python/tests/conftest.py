"""Shared fixtures: the repository, the `nlg-judge` command to compare with, a judge on
the default model (SmolLM2-135M-Instruct, from the model cache) without a result cache,
so that every figure the tests compare is computed by the model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "examples" / "data" / "library.jsonl"
STORIES = ROOT / "examples" / "data" / "stories.jsonl"


def cli_command() -> list:
    """The command-line program: $NLG_JUDGE_BIN (python/test.sh sets the release
    binary), else the release binary of the workspace, else the package's console
    script."""
    binary = os.environ.get("NLG_JUDGE_BIN") or str(ROOT / "target" / "release" / "nlg-judge")
    if Path(binary).is_file():
        return [binary]
    script = shutil.which("nlg-judge", path=str(Path(sys.executable).parent))
    assert script, "no nlg-judge command to compare with"
    return [script]


@pytest.fixture(scope="session")
def cli():
    """Run `nlg-judge ARGS`; returns the completed process (text output)."""

    def run(*args, check=True, **kwargs):
        process = subprocess.run(
            [*cli_command(), *map(str, args)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            **kwargs,
        )
        if check and process.returncode != 0:
            raise AssertionError(f"nlg-judge {' '.join(map(str, args))} failed:\n{process.stderr}")
        return process

    return run


@pytest.fixture(scope="session")
def judge():
    import nlg_judge

    return nlg_judge.Judge(cache=False, progress=False)


def read_rows(path: Path) -> list:
    import json

    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
