"""What evaluation clients send, through the real `openai` client against a live tf serve on the
default model: python3 eval_client_check.py BASE_URL.

- echo + logprobs with max_tokens 0 scores a prompt: its tokens' logprobs equal, bit for bit, the
  logprobs of the same tokens when a greedy run generated them, alone and with 8 other requests
  running; sent again (its prefix kept) it runs afresh with the same answer; streamed == whole;
- vLLM's prompt_logprobs agrees with echo's;
- OpenAI's four prompt forms (string, strings, token ids, token-id arrays) through the client, and
  each prompt of a multi-prompt request equals that prompt sent alone;
- a token id outside the vocabulary is a 400 naming it, and the server keeps serving;
- lm-evaluation-harness's loglikelihood request (local-completions: token-id prompts, echo,
  logprobs 1, max_tokens 1) answers with the fields it reads.
Prints "ok" and exits 0 on success; prints what failed and exits 1.
"""

import json
import pathlib
import sys
import threading
import urllib.request

import openai

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from openai_client_check import fail, raw_post as post  # noqa: E402


def post_stream(base, path, body):
    req = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    events = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def ids_of(token_names):
    return [int(t.split(":", 1)[1]) for t in token_names]


PROMPT = "The tower is 324 metres tall, about the same height as an 81-storey building, and"


def check_scoring(base):
    ids = post(base, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]
    gen = post(base, "/v1/completions", {"prompt": ids, "max_tokens": 16, "temperature": 0,
                                          "logprobs": 2, "return_tokens_as_token_ids": True})
    glp = gen["choices"][0]["logprobs"]
    generated = ids_of(glp["tokens"])
    if len(generated) != 16:
        fail(f"the greedy run made {len(generated)} tokens, not 16")
    score = {"prompt": ids + generated, "max_tokens": 0, "echo": True, "logprobs": 2,
             "temperature": 0, "return_tokens_as_token_ids": True}
    whole = post(base, "/v1/completions", score)
    lp = whole["choices"][0]["logprobs"]
    n = len(ids)
    if whole["usage"]["completion_tokens"] != 0:
        fail(f"max_tokens 0 generated: {whole['usage']}")
    if ids_of(lp["tokens"]) != ids + generated:
        fail("the echoed tokens are not the prompt's")
    if lp["token_logprobs"][0] is not None or lp["top_logprobs"][0] is not None:
        fail("the first prompt token has a logprob")
    if lp["token_logprobs"][n:] != glp["token_logprobs"]:
        fail(f"scored != generated logprobs:\n{lp['token_logprobs'][n:]}\n{glp['token_logprobs']}")
    if lp["top_logprobs"][n:] != glp["top_logprobs"]:
        fail("scored != generated top logprobs")
    if any(v is None or v > 0 for v in lp["token_logprobs"][1:]):
        fail("a prompt logprob is missing or positive")

    # The same with eight other requests running beside it.
    results = {}

    def other(i):
        results[i] = post(base, "/v1/completions", {"prompt": f"Request {i} asks for", "max_tokens":
                                                    48, "temperature": 0})

    threads = [threading.Thread(target=other, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    beside = post(base, "/v1/completions", score)
    for t in threads:
        t.join()
    if beside["choices"][0]["logprobs"] != lp:
        fail("scoring beside 8 other requests changed the logprobs")
    again = post(base, "/v1/completions", score)
    if again["choices"][0]["logprobs"] != lp:
        fail("scoring again (the prefix kept) changed the logprobs")
    if again["usage"]["prompt_tokens_details"]["cached_tokens"] != 0:
        fail("a scored prompt reused kept positions (they have no logits to give)")

    events = post_stream(base, "/v1/completions", dict(score, stream=True))
    streamed = []
    for e in events:
        for ch in e.get("choices", []):
            if ch.get("logprobs"):
                streamed += ch["logprobs"]["token_logprobs"]
    if streamed != lp["token_logprobs"]:
        fail("streamed logprobs != whole")

    vllm = post(base, "/v1/completions", {"prompt": ids + generated, "max_tokens": 0,
                                          "prompt_logprobs": 1, "temperature": 0})
    pl = vllm["choices"][0]["prompt_logprobs"]
    if pl[0] is not None or len(pl) != len(ids) + 16:
        fail("prompt_logprobs: the first entry is not null or the length is off")
    for k in range(1, len(pl)):
        tok = str((ids + generated)[k])
        if pl[k][tok]["logprob"] != lp["token_logprobs"][k]:
            fail(f"prompt_logprobs[{k}] != echo's")
    print("scored", n + 16, "tokens; sum of logprobs", sum(lp["token_logprobs"][1:]))


def check_forms(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    texts = ["Paris is the capital of", "The largest ocean is"]
    alone = [client.completions.create(model=model, prompt=t, max_tokens=8, temperature=0)
             .choices[0].text for t in texts]
    many = client.completions.create(model=model, prompt=texts, max_tokens=8, temperature=0)
    if [c.text for c in sorted(many.choices, key=lambda c: c.index)] != alone:
        fail("a multi-prompt reply differs from its prompts sent alone")
    ids = [post(base, "/tokenize", {"content": t, "add_special": True})["tokens"] for t in texts]
    one = client.completions.create(model=model, prompt=ids[0], max_tokens=8, temperature=0)
    if one.choices[0].text != alone[0]:
        fail("a token-id prompt differs from its text")
    lists = client.completions.create(model=model, prompt=ids, max_tokens=8, temperature=0)
    if [c.text for c in sorted(lists.choices, key=lambda c: c.index)] != alone:
        fail("token-id arrays differ from their texts")
    try:
        client.completions.create(model=model, prompt=[2, 651, 10**7], max_tokens=2)
        fail("a token id outside the vocabulary was accepted")
    except openai.BadRequestError as e:
        if "10000000" not in str(e):
            fail(f"the 400 does not name the bad id: {e}")
    if not client.completions.create(model=model, prompt="Still", max_tokens=2).choices[0].text:
        fail("no reply after the refused request")


def check_lm_eval_shape(base):
    """The request lm-eval's local-completions sends for loglikelihood, and what it reads."""
    ctx = post(base, "/tokenize", {"content": "Question: 2 + 2 =", "add_special": True})["tokens"]
    conts = [post(base, "/tokenize", {"content": c, "add_special": False})["tokens"]
             for c in [" 4", " 5"]]
    reply = post(base, "/v1/completions", {"model": "m", "prompt": [ctx + c for c in conts],
                                           "temperature": 0, "max_tokens": 1, "logprobs": 1,
                                           "seed": 1234, "echo": True})
    scores = []
    for choice, cont in zip(sorted(reply["choices"], key=lambda c: c["index"]), conts):
        lps = choice["logprobs"]["token_logprobs"][len(ctx):-1]
        tops = choice["logprobs"]["top_logprobs"][len(ctx):-1]
        if len(lps) != len(cont):
            fail(f"lm-eval's slice has {len(lps)} logprobs for {len(cont)} tokens")
        greedy = all(lp == max(top.values()) for lp, top in zip(lps, tops))
        scores.append((sum(lps), greedy))
    print("lm-eval shape:", scores)


def main():
    base = sys.argv[1]
    check_scoring(base)
    check_forms(base)
    check_lm_eval_shape(base)
    print("ok")


if __name__ == "__main__":
    main()
