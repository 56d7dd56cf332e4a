"""`Judge(backend=...)`: the default model served by `nlg-judge serve` on loopback and
scored through the OpenAI-compatible API gives the in-process judge's probabilities;
options that only apply to a model loaded here are refused before anything connects."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest

import nlg_judge
from conftest import LIBRARY, ROOT, cli_command, read_rows

MODEL = "smollm2-135m-instruct"
# Three candidates of the demo input (6 comparisons): the route, not the volume, is tested.
ROWS = read_rows(LIBRARY)[:3]
# Two f32 batchings of the same model (the service answers prompt by prompt, the
# in-process trie shares prefixes): measured |Δp| 2e-6 on this input.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`nlg-judge serve` on a free loopback port; yields its OpenAI base address."""
    cache = tmp_path_factory.mktemp("serve-cache")
    env = dict(os.environ, NLG_JUDGE_CACHE=os.environ.get("NLG_JUDGE_CACHE", str(cache)))
    process = subprocess.Popen(
        [*cli_command(), "serve", "--addr", "127.0.0.1:0", "--model", MODEL],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        said = []
        for line in process.stderr:
            said.append(line)
            found = re.search(r"http://\S+", line) if "serving" in line else None
            if found:
                break
        else:
            raise AssertionError("nlg-judge serve ended before listening:\n" + "".join(said))
        yield found.group(0).rstrip("/") + "/v1"
    finally:
        process.kill()
        process.wait()


def test_comparisons_through_the_service_equal_the_judge_in_process(served, judge):
    remote = nlg_judge.Judge(MODEL, cache=False, progress=False, backend=served)
    assert remote.model["name"] == MODEL
    assert remote.model["architecture"].endswith("(served)")
    assert remote.model["fingerprint"].startswith("remote-")
    here = judge.compare(ROWS, "coherence")
    there = remote.compare(ROWS, "coherence")
    assert len(here) == len(there) == 1
    p_here, p_there = here[0].probabilities, there[0].probabilities
    off_diagonal = ~np.eye(len(p_here), dtype=bool)
    assert np.all(np.isfinite(p_there[off_diagonal]))
    assert np.max(np.abs(p_here - p_there)[off_diagonal]) < TOLERANCE
    assert here[0].ranking() == there[0].ranking()


class Notes:
    """A progress sink that keeps the notes a call sends."""

    def __init__(self):
        self.notes = []

    def begin(self, total, unit):
        pass

    def advance(self, steps):
        pass

    def end(self):
        pass

    def note(self, text):
        self.notes.append(text)


def test_scores_through_the_service_equal_the_judge_in_process(served, judge):
    remote = nlg_judge.Judge(
        MODEL, cache=False, progress=False, backend={"url": served, "concurrency": 2}
    )
    here = judge.score(ROWS, "prompt", attribute="coherence")
    sink = Notes()
    there = remote.score(ROWS, "prompt", attribute="coherence", progress=sink)
    assert np.max(np.abs(here.scores - there.scores)) < TOLERANCE * 10
    # The call ends with the backend's line: requests made, retries, labels per route.
    closing = [n for n in sink.notes if n.startswith("backend http://127.0.0.1:")]
    assert len(closing) == 1, sink.notes
    first = closing[0]
    requests = int(re.search(r": (\d+) requests, 0 retried, 0 failed;", first).group(1))
    assert requests >= len(ROWS), closing[0]
    # Our service takes allowed_token_ids: the labels outside the top-K go by restricted
    # generation, none by echo.
    routes = re.search(r"labels by top-\d+ \d+, by allowed_token_ids (\d+), by echo 0$", first)
    assert routes and int(routes.group(1)) > 0, first
    # A second call's line counts that call's requests, not the Judge's whole life.
    again = Notes()
    remote.score(ROWS, "prompt", attribute="coherence", progress=again)
    closing = [n for n in again.notes if n.startswith("backend http://127.0.0.1:")]
    assert len(closing) == 1, again.notes
    # The same labels by the same routes; no more requests (the first call's include the
    # connection's probes).
    assert routes.group(0) in closing[0], (first, closing[0])
    second = int(re.search(r": (\d+) requests, 0 retried, 0 failed;", closing[0]).group(1))
    assert 0 < second <= requests, (first, closing[0])


def test_local_options_and_unknown_backend_options_are_refused(served):
    with pytest.raises(ValueError, match="precision='bf16' applies to a model loaded here"):
        nlg_judge.Judge(MODEL, precision="bf16", backend=served, progress=False)
    with pytest.raises(ValueError, match="concurency"):
        nlg_judge.Judge(MODEL, backend={"url": served, "concurency": 4}, progress=False)
    with pytest.raises(nlg_judge.NlgJudgeError, match="does not serve a model named 'other'"):
        nlg_judge.Judge("other", backend=served, progress=False, cache=False)
