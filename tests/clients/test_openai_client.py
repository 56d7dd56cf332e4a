"""The `openai` package against `nlg-judge serve`: completions and chat, log-probs,
streaming, usage, and errors as the package raises them.

Run by tests/clients/run.sh, which starts the service and sets NLG_JUDGE_URL (the /v1
base URL), NLG_JUDGE_TOKEN and NLG_JUDGE_MODEL; over TLS (`run.sh tls`) also NLG_JUDGE_CA,
the CA the client verifies the service's certificate with.
"""

import math
import os

import httpx
import openai
import pytest

URL = os.environ["NLG_JUDGE_URL"]
TOKEN = os.environ["NLG_JUDGE_TOKEN"]
MODEL = os.environ.get("NLG_JUDGE_MODEL", "smollm2-135m-instruct")
CA = os.environ.get("NLG_JUDGE_CA")
VERIFY = CA if CA else True


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=URL, api_key=TOKEN, max_retries=0, timeout=300,
                         http_client=httpx.Client(verify=VERIFY, timeout=300))


@pytest.mark.skipif(CA is None, reason="the service runs without TLS")
def test_tls_is_verified_and_plain_http_is_refused(client):
    assert URL.startswith("https://")
    assert client.models.list().data[0].id == MODEL
    # A client that does not trust the CA does not connect.
    stranger = openai.OpenAI(base_url=URL, api_key=TOKEN, max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        stranger.models.list()
    plain = httpx.get(URL.replace("https://", "http://", 1) + "/models",
                      headers={"Authorization": f"Bearer {TOKEN}"})
    assert plain.status_code == 400 and "https://" in plain.text


def test_the_model_list_names_the_served_model(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_echo_gives_every_prompt_tokens_logprob_and_alternatives(client):
    prompt = "Question: Which planet is closest to the sun?\nAnswer: Mercury"
    r = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=5, temperature=0
    )
    choice = r.choices[0]
    lp = choice.logprobs
    assert choice.text == prompt
    assert "".join(lp.tokens) == prompt
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert len(lp.tokens) == r.usage.prompt_tokens
    for token, logprob, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert logprob <= 0
        values = list(top.values())
        assert len(values) == 5
        assert values == sorted(values, reverse=True), "most likely first"
        assert sum(math.exp(v) for v in values) <= 1 + 1e-9
        assert values[0] >= logprob
    assert lp.text_offset == sorted(lp.text_offset)
    assert r.usage.completion_tokens == 0


def test_token_id_prompts_in_one_request_answer_in_order(client):
    root = URL.removesuffix("/v1")
    ids = httpx.post(
        f"{root}/tokenize",
        json={"prompt": "Hello there", "add_special_tokens": False},
        headers={"Authorization": f"Bearer {TOKEN}"},
        verify=VERIFY,
    ).json()["tokens"]
    text = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=0, echo=True, logprobs=0)
    r = client.completions.create(model=MODEL, prompt=[ids, ids[:1]], max_tokens=0, echo=True, logprobs=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == "Hello there"
    assert r.choices[0].logprobs.token_logprobs[1:] == pytest.approx(
        text.choices[0].logprobs.token_logprobs[1:], abs=1e-4
    )
    assert r.choices[1].logprobs.tokens == text.choices[0].logprobs.tokens[:1]
    assert r.usage.prompt_tokens == len(ids) + 1


def test_chat_logprobs_with_twenty_alternatives(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Rate 'The cat sat on the mat.' for fluency from 1 to 5."}],
        logprobs=True,
        top_logprobs=20,
        max_tokens=4,
        temperature=0,
    )
    choice = r.choices[0]
    content = choice.logprobs.content
    assert "".join(t.token for t in content) == choice.message.content
    for t in content:
        assert len(t.top_logprobs) == 20
        assert t.top_logprobs[0].token == t.token  # greedy
        assert t.top_logprobs[0].logprob == t.logprob
        assert bytes(t.bytes).decode() == t.token
        values = [a.logprob for a in t.top_logprobs]
        assert values == sorted(values, reverse=True)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_seeded_sampling_repeats_and_choices_are_indexed(client):
    ask = lambda: client.chat.completions.create(  # noqa: E731
        model=MODEL,
        messages=[{"role": "user", "content": "Write one word."}],
        temperature=1.0,
        top_p=0.9,
        seed=11,
        n=3,
        max_tokens=6,
    )
    a, b = ask(), ask()
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]


def test_streaming_gives_the_same_answer(client):
    messages = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text == whole.choices[0].message.content
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_shared_prefixes_are_reported_as_cached_tokens(client):
    context = "Passage: The river rose through the night and by morning the bridge was closed. " * 3
    first = client.completions.create(model=MODEL, prompt=context + "Question: What closed?", max_tokens=0, echo=True, logprobs=0)
    second = client.completions.create(model=MODEL, prompt=context + "Question: When?", max_tokens=0, echo=True, logprobs=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens // 2, second.usage
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt=context + "Question: What closed?", max_tokens=0, echo=True, logprobs=0
    )
    assert int(raw.headers["nlg-judge-cached-prompt-tokens"]) == raw.parse().usage.prompt_tokens


def test_errors_are_raised_as_the_package_expects(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4o", prompt="x")
    assert e.value.code == "model_not_found" and e.value.param == "model"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=5)
    assert e.value.param == "temperature" and e.value.type == "invalid_request_error"
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.completions.create(model=MODEL, prompt=[100] * 9000, max_tokens=0)
    assert e.value.code == "context_length_exceeded"
    wrong = openai.OpenAI(base_url=URL, api_key="wrong", max_retries=0,
                          http_client=httpx.Client(verify=VERIFY))
    with pytest.raises(openai.AuthenticationError) as e:
        wrong.models.list()
    assert e.value.code == "invalid_api_key"
