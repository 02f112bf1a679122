"""The real `openai` client against a live tf serve: python3 openai_client_check.py BASE_URL [MODE].

MODE "client" (default): chat and completions, streamed and not, greedy; checks content is
non-empty, usage is present, the stream's chunks concatenate to the non-streamed text, and the
token_sha of both agree. Prints the reply to a factual question.
MODE "concurrent N PARALLEL": N greedy requests at once while /v1/load is polled every 50 ms;
checks at most PARALLEL run at once, some queue when N > PARALLEL, and every reply equals its
solo run (token_sha).
MODE "api": the OpenAI fields beyond the basics: a drawn seed comes back in the reply's tf block
and repeats the text when sent; n=2 gives two choices, the first equal to the single request with
that seed; logit_bias forces a token; echo puts the prompt first; tool_choice required and a named
function give a call on Gemma 3, whose template teaches no call format (the generic fallback);
/tokenize and /detokenize round-trip.
Prints "ok" and exits 0 on success; prints what failed and exits 1.
"""

import json
import sys
import threading
import time
import urllib.request

import openai


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def raw_post(base, path, body):
    req = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def get_json(base, path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


def check_client(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    models = client.models.list()
    ids = [m.id for m in models.data]
    if not ids:
        fail("/v1/models lists no model")
    model = ids[0]
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    full = client.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    if not text:
        fail("empty non-streamed chat content")
    if full.usage is None or full.usage.completion_tokens <= 0 or full.usage.prompt_tokens <= 0:
        fail(f"usage missing or empty: {full.usage}")
    # The default GGUF is the base (not instruction-tuned) Gemma 3 270M: llama.cpp's greedy
    # reply to this chat also repeats the question, so naming Paris is reported, not required.
    print("names Paris:", "paris" in text.lower())
    sha = (full.model_extra or {}).get("tf", {}).get("token_sha")
    if not sha or len(sha) != 64:
        fail(f"no tf.token_sha on the reply: {full.model_extra}")

    pieces, usage, stream_sha = [], None, None
    stream = client.chat.completions.create(
        model=model,
        messages=msgs,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        extra = (chunk.model_extra or {}).get("tf")
        if extra and extra.get("token_sha"):
            stream_sha = extra["token_sha"]
        for c in chunk.choices:
            if c.delta and c.delta.content:
                pieces.append(c.delta.content)
    streamed = "".join(pieces)
    if streamed != text:
        fail(f"stream {streamed!r} != non-streamed {text!r}")
    if usage is None or usage.completion_tokens != full.usage.completion_tokens:
        fail(f"stream usage {usage} != {full.usage}")
    if stream_sha is not None and stream_sha != sha:
        fail(f"stream token_sha {stream_sha} != {sha}")

    comp = client.completions.create(
        model=model, prompt="The three primary colors are", max_tokens=16, temperature=0
    )
    if not comp.choices[0].text or comp.usage is None:
        fail("empty completion or no usage")
    spieces = []
    for chunk in client.completions.create(
        model=model, prompt="The three primary colors are", max_tokens=16, temperature=0, stream=True
    ):
        for c in chunk.choices:
            spieces.append(c.text or "")
    if "".join(spieces) != comp.choices[0].text:
        fail(f"completion stream {''.join(spieces)!r} != {comp.choices[0].text!r}")
    print("reply:", text.replace("\n", " "))
    print("ok")


def check_concurrent(base, n, parallel):
    prompts = [f"Write one sentence about the number {i}." for i in range(n)]

    def ask(p):
        body = {"prompt": p, "max_tokens": 24, "temperature": 0}
        return raw_post(base, "/v1/completions", body)["tf"]["token_sha"]

    solo = [ask(p) for p in prompts]
    results = [None] * n
    errors = []
    max_running, max_queued, done = 0, 0, threading.Event()

    def poll():
        nonlocal max_running, max_queued
        while not done.is_set():
            load = get_json(base, "/v1/load")
            max_running = max(max_running, int(load["running"]))
            max_queued = max(max_queued, int(load["queued"]))
            time.sleep(0.05)

    def worker(i):
        try:
            results[i] = ask(prompts[i])
        except Exception as e:  # noqa: BLE001 - report any failure
            errors.append(f"request {i}: {e}")

    poller = threading.Thread(target=poll)
    poller.start()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    poller.join()
    if errors:
        fail("; ".join(errors))
    if max_running > parallel:
        fail(f"{max_running} ran at once, more than --parallel {parallel}")
    if n > parallel and max_queued == 0:
        fail(f"{n} requests at --parallel {parallel} but none was seen queued")
    for i in range(n):
        if results[i] != solo[i]:
            fail(f"request {i}: concurrent token_sha {results[i]} != solo {solo[i]}")
    print(f"max running {max_running}, max queued {max_queued}")
    print("ok")


def check_api(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    prompt = "Once upon a time"
    first = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=1.0)
    seed = (first.model_extra or {}).get("tf", {}).get("seed")
    if not isinstance(seed, int):
        fail(f"no tf.seed on a reply without a seed: {first.model_extra}")
    again = client.completions.create(
        model=model, prompt=prompt, max_tokens=16, temperature=1.0, seed=seed
    )
    if again.choices[0].text != first.choices[0].text:
        fail(f"seed {seed}: {again.choices[0].text!r} != {first.choices[0].text!r}")
    two = client.completions.create(
        model=model, prompt=prompt, max_tokens=16, temperature=1.0, seed=seed, n=2
    )
    if len(two.choices) != 2 or two.choices[0].text != first.choices[0].text:
        fail(f"n=2 with seed {seed}: {[c.text for c in two.choices]} vs {first.choices[0].text!r}")

    ids = raw_post(base, "/tokenize", {"content": " Paris"})["tokens"]
    if len(ids) != 1:
        fail(f"' Paris' is not one token here: {ids}")
    if raw_post(base, "/detokenize", {"tokens": ids})["content"] != " Paris":
        fail("/detokenize does not give ' Paris' back")
    forced = client.completions.create(
        model=model, prompt="The capital of Italy is", max_tokens=3, temperature=0,
        logit_bias={str(ids[0]): 100},
    )
    if forced.choices[0].text != " Paris" * 3:
        fail(f"logit_bias +100 on ' Paris' gave {forced.choices[0].text!r}")

    echoed = client.completions.create(
        model=model, prompt=prompt, max_tokens=4, temperature=0, echo=True
    )
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0)
    if echoed.choices[0].text != prompt + plain.choices[0].text:
        fail(f"echo: {echoed.choices[0].text!r} != {prompt + plain.choices[0].text!r}")

    # Gemma 3's template teaches no call format: the generic fallback forces a JSON call.
    weather = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city.",
        "parameters": {"type": "object", "required": ["city"],
                       "properties": {"city": {"type": "string", "maxLength": 20}}}}}]
    for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
        r = client.chat.completions.create(
            model=model, max_tokens=64, temperature=0, tools=weather, tool_choice=choice,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        )
        c = r.choices[0]
        calls = c.message.tool_calls or []
        if c.finish_reason != "tool_calls" or len(calls) != 1:
            fail(f"tool_choice {choice!r}: {c.finish_reason} {c.message!r}")
        args = json.loads(calls[0].function.arguments)
        if calls[0].function.name != "get_weather" or not isinstance(args.get("city"), str):
            fail(f"tool_choice {choice!r}: call {calls[0]!r}")
    print("seed", seed, "repeats; n=2, logit_bias, echo, tool_choice required and named")
    print("ok")


def check_tools(base):
    """A toy_serve whose model replies from --script (tests/serve/tool_calls_live_test.cpp):
    tool_calls and reasoning_content parsed by the openai client, whole and streamed, and the
    tool result sent back."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    model = client.models.list().data[0].id
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
    messages = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
    r = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=400)
    choice = r.choices[0]
    if choice.finish_reason != "tool_calls":
        fail(f"finish_reason {choice.finish_reason!r}")
    calls = choice.message.tool_calls or []
    if len(calls) != 1 or calls[0].function.name != "get_weather":
        fail(f"tool_calls {calls!r}")
    if json.loads(calls[0].function.arguments) != {"city": "Paris", "days": 3}:
        fail(f"arguments {calls[0].function.arguments!r}")
    reasoning = getattr(choice.message, "reasoning_content", None)
    if reasoning != "The user wants weather.":
        fail(f"reasoning_content {reasoning!r}")
    if choice.message.content:
        fail(f"content {choice.message.content!r} beside the call")

    stream = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                            max_tokens=400, stream=True)
    s_reasoning, s_content, s_calls, s_finish = "", "", {}, None
    for ch in stream:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        s_reasoning += getattr(d, "reasoning_content", None) or ""
        s_content += d.content or ""
        for tc in d.tool_calls or []:
            e = s_calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            e["id"] = tc.id or e["id"]
            if tc.function:
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
        s_finish = ch.choices[0].finish_reason or s_finish
    if s_reasoning != reasoning or s_content or s_finish != "tool_calls":
        fail(f"streamed: {s_reasoning!r} {s_content!r} {s_finish!r}")
    if len(s_calls) != 1 or s_calls[0]["name"] != "get_weather" or not s_calls[0]["id"]:
        fail(f"streamed tool_calls {s_calls!r}")
    if json.loads(s_calls[0]["arguments"]) != {"city": "Paris", "days": 3}:
        fail(f"streamed arguments {s_calls[0]['arguments']!r}")

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": calls[0].id,
                     "content": json.dumps({"temp": 21, "sky": "sunny"})})
    final = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                           max_tokens=400)
    if final.choices[0].message.content != "It is 21 C and sunny in Paris.":
        fail(f"final answer {final.choices[0].message.content!r}")
    if final.choices[0].finish_reason != "stop" or final.choices[0].message.tool_calls:
        fail(f"final {final.choices[0]!r}")
    print("tool call round trip, reasoning split, streamed and not")
    print("ok")


def metric(base, series):
    """The value of one Prometheus sample line `series value` of /metrics, or None."""
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split(" ")[-1])
    return None


def check_chat(base):
    """A 5-turn chat, greedy: turn k reuses everything turn k-1 left in the KV (its prompt and
    reply) and runs only its new tokens, counted from usage and /metrics; each reply equals the
    same request with cache_prompt false (the whole prompt run afresh)."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    label = '{model_name="%s"}' % model
    hits0 = metric(base, "vllm:prefix_cache_hits_total" + label)
    turns = ["Name one color.", "Name a fruit of that color.", "How does it taste?",
             "Where does it grow?", "Thank you. Say goodbye in one word."]
    messages, prev, cached_sum = [], None, 0
    for k, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        kw = dict(model=model, messages=messages, max_tokens=24, temperature=0)
        r = client.chat.completions.create(**kw)
        fresh = client.chat.completions.create(**kw, extra_body={"cache_prompt": False})
        got, want = r.model_extra["tf"]["token_sha"], fresh.model_extra["tf"]["token_sha"]
        if got != want or r.choices[0].message.content != fresh.choices[0].message.content:
            fail(f"turn {k}: resumed {r.choices[0].message.content!r} != "
                 f"fresh {fresh.choices[0].message.content!r}")
        u = r.usage
        cached = u.prompt_tokens_details.cached_tokens
        if fresh.usage.prompt_tokens_details.cached_tokens != 0:
            fail(f"turn {k}: cache_prompt false still reused {fresh.usage}")
        ran = u.prompt_tokens - cached
        if prev is None:
            print(f"turn {k}: prompt {u.prompt_tokens}, cached {cached}")
        else:
            # New: this turn's tokens past the previous prompt and reply. Tolerance 2: the
            # previous reply's last sampled token never ran when it hit max_tokens, and the
            # template may retokenize the reply's last token differently.
            new = u.prompt_tokens - prev.prompt_tokens - prev.completion_tokens
            print(f"turn {k}: prompt {u.prompt_tokens}, cached {cached}, ran {ran}, new {new}, "
                  f"previous reply {prev.completion_tokens} ({r_prev_finish})")
            if cached < prev.prompt_tokens:
                fail(f"turn {k}: cached {cached} < the previous prompt's {prev.prompt_tokens}")
            if ran > new + 2:
                fail(f"turn {k}: ran {ran} prompt tokens, more than the {new} new ones + 2")
        cached_sum += cached
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
        prev, r_prev_finish = u, r.choices[0].finish_reason
    hits = metric(base, "vllm:prefix_cache_hits_total" + label)
    if hits is None or hits0 is None or hits - hits0 != cached_sum:
        fail(f"/metrics prefix cache hits went {hits0} -> {hits}; the replies' cached sum is "
             f"{cached_sum}")
    print(f"5 turns, {cached_sum} prompt tokens from the cache, replies == fresh")
    print("ok")


def main():
    base = sys.argv[1].rstrip("/")
    mode = sys.argv[2] if len(sys.argv) > 2 else "client"
    if mode == "client":
        check_client(base)
    elif mode == "api":
        check_api(base)
    elif mode == "tools":
        check_tools(base)
    elif mode == "chat":
        check_chat(base)
    elif mode == "concurrent":
        check_concurrent(base, int(sys.argv[3]), int(sys.argv[4]))
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
