"""Load on `elical-hf serve`: requests/s and p50 / p95 latency at 1, 4 and 16 concurrent clients, micro-batched vs
one request at a time, measured in the same run; and (`--scenario long`) the latency of short requests beside a
client that asks for long answers, with the server's `--max_tokens_limit` and without it.

Two server processes serve the same gate model side by side:

- batched: `--max_batch_size 16 --batch_wait_ms 5` (the defaults): requests arriving together are scored and decoded
  in one `model.answer` call;
- one at a time: `--max_batch_size 1 --batch_wait_ms 0`: each request is its own call, in arrival order.

For each concurrency c, c client threads send `--requests` requests in all (each thread one after another, a new
request as soon as its last one is answered), after `--warmup` untimed ones. Latency is the client's wall time per
request; requests/s is requests over the wall time of the round. Rounds alternate between the two servers, so a drift
of the machine's speed weighs on both. `--threshold 0` (the default) answers every question, so each request costs a
prefill and a full decode (a real threshold abstains on some, which then cost only their prefill).

Long beside short (`--scenario long`): two servers, one with the default `--max_tokens_limit` (256; a client may ask
for no more) and one whose limit lets the long client have its `--long_tokens`. On each, one client asks again and
again for a long answer (a question that makes the model count, `max_tokens` = `--long_tokens`, or the limit), and
after `--long_head_start` seconds `--short_clients` clients each ask `--short_requests` questions with
`max_tokens` = `--short_tokens`, one after another; the short requests' median and p95 latency are reported per
server (medians over `--rounds`, the servers taking turns).

Streaming (`--scenario stream`, the batched server): c clients send `stream: true` requests; per request, the time to
the decision (the first chunk, with its `elical` field), to the first token (the first chunk with content) and to
`[DONE]`; median and p90 at each concurrency.

Confidence endpoint (`--scenario confidence`, the batched server): c clients each post `POST /v1/confidence` requests
of `--questions_per_request` questions, one after another; questions scored per second and the p50 latency.

Short beside heavy (`--scenario heavy`, the batched server with its default limits): `--short_clients` clients each
ask `--short_requests` questions of `max_tokens` = `--short_tokens`, one after another, (a) on the idle server, (b)
while one client posts a maximal `POST /v1/confidence` request again and again (`--heavy_questions` distinct
questions, 256, whose prompts fill `--heavy_tokens`, the server's `--max_confidence_tokens` of 32,768), and (c) while
one client streams the long question with 4 stop strings of the longest length the server takes (1,000 characters,
each a near-copy of the counting the question asks for, never met: an answer that counts is held back as the beginning
of one) and the largest `max_tokens` (`--heavy_stream_tokens`, 256); the short requests' p50 and p95 latency per
condition, and the heavy requests' own median time (medians over `--rounds`).

    python benchmarks/serve_load.py                          # the shipped stage-1 adapter on the embedded SmolLM2
    python benchmarks/serve_load.py --requests 64 --max_tokens 32 --concurrency 1 4 16
    python benchmarks/serve_load.py --scenario long --long_tokens 1000 --rounds 3
    python benchmarks/serve_load.py --scenario stream confidence --concurrency 1 4 16
    python benchmarks/serve_load.py --scenario heavy --rounds 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import threading
import time
import urllib.request

from common import print_machine, print_table


STAGE1 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "elical_hf", "resources", "demo",
                      "stage1-smollm2-135m-instruct")
SERVERS = {"batched": ["--max_batch_size", "16", "--batch_wait_ms", "5"],
           "one at a time": ["--max_batch_size", "1", "--batch_wait_ms", "0"]}
LONG_QUESTION = "Count from 1 to 2000, writing out every number, separated by commas."
"""What the long client asks: an answer that goes on until its max_tokens."""


def lscpu_model() -> str:
    """The CPU's model name as `lscpu` prints it."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (no lscpu)"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")),
                "unknown")


def percentile(values: list[float], q: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q * (len(ranked) - 1))))]


def load_round(server, questions: list[str], concurrency: int, requests: int, max_tokens: int) -> dict[str, float]:
    """`requests` requests from `concurrency` threads: requests/s, p50 and p95 latency (seconds), failures."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        body = {"messages": [{"role": "user", "content": questions[index % len(questions)]}],
                "max_tokens": max_tokens}
        start = time.perf_counter()
        status, reply, _ = server.post("/chat/completions", body)
        elapsed = time.perf_counter() - start
        with lock:
            latencies.append(elapsed)
            if status != 200:
                failures.append(f"{status}: {reply}")

    wall = in_threads(concurrency, requests, one)
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return {"rps": requests / wall, "p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95)}


def short_beside(server, questions: list[str], heavy, args: argparse.Namespace) -> dict[str, float]:
    """`heavy()` (a request that fails loudly; `None`: none) again and again on one thread while, after
    `--long_head_start` seconds, `--short_clients` clients each ask `--short_requests` questions of
    `max_tokens=--short_tokens`: the short requests' p50 and p95 latency (seconds), how many heavy requests ended and
    their median time."""
    done = threading.Event()
    shorts: list[float] = []
    heavies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def short_client(offset: int) -> None:
        for k in range(args.short_requests):
            body = {"messages": [{"role": "user", "content": questions[(offset * args.short_requests + k) %
                                                                        len(questions)]}],
                    "max_tokens": args.short_tokens}
            start = time.perf_counter()
            status, reply, _ = server.post("/chat/completions", body)
            with lock:
                shorts.append(time.perf_counter() - start)
                if status != 200:
                    failures.append(f"{status}: {reply}")

    def heavy_client() -> None:
        while not done.is_set():
            start = time.perf_counter()
            heavy()
            heavies.append(time.perf_counter() - start)

    background = [threading.Thread(target=heavy_client)] if heavy is not None else []
    for thread in background:
        thread.start()
    time.sleep(args.long_head_start if heavy is not None else 0)
    threads = [threading.Thread(target=short_client, args=(i,)) for i in range(args.short_clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    for thread in background:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return {"p50": percentile(shorts, 0.5), "p95": percentile(shorts, 0.95), "longs": len(heavies),
            "heavy": statistics.median(heavies) if heavies else float("nan")}


def chat(server, question: str, max_tokens: int) -> None:
    """One chat request that must succeed."""
    status, reply, _ = server.post("/chat/completions", {"messages": [{"role": "user", "content": question}],
                                                         "max_tokens": max_tokens})
    if status != 200:
        raise SystemExit(f"A request failed: {status}: {reply}")


def long_beside_short(server, questions: list[str], long_tokens: int, args: argparse.Namespace) -> dict[str, float]:
    """One client asks [`LONG_QUESTION`] with `max_tokens=long_tokens` until the short clients are done
    ([`short_beside`])."""
    return short_beside(server, questions, lambda: chat(server, LONG_QUESTION, long_tokens), args)


def in_threads(concurrency: int, requests: int, call) -> float:
    """`call(index)` for `requests` indices from `concurrency` threads, each one after another; the wall time. The
    first exception a call raises is raised here, after every thread stopped."""
    counter, lock, errors = iter(range(requests)), threading.Lock(), []

    def client() -> None:
        while True:
            with lock:
                index = next(counter, None) if not errors else None
            if index is None:
                return
            try:
                call(index)
            except BaseException as error:  # noqa: BLE001 - raised in the main thread
                errors.append(error)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def streamed(server, question: str, max_tokens: int, **fields) -> dict[str, float]:
    """One `stream: true` request (with more body `fields`): seconds to its decision (the first chunk), its first
    token and `[DONE]`."""
    body = json.dumps({"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens, "stream": True,
                       **fields})
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    start = time.perf_counter()
    times: dict[str, float] = {}
    try:
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"A streamed request failed: {response.status}: {response.read()[:300]!r}")
        buffer = b""
        while "done" not in times:
            data = response.read1()
            if not data:
                raise SystemExit("A stream ended before [DONE].")
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                now = time.perf_counter() - start
                payload = event.removeprefix(b"data: ")
                times.setdefault("decision", now)
                if payload == b"[DONE]":
                    times["done"] = now
                elif any(choice["delta"].get("content") for choice in json.loads(payload).get("choices", [])):
                    times.setdefault("first_token", now)
    finally:
        connection.close()
    times.setdefault("first_token", times["done"])  # an empty answer
    return times


def run_stream_scenario(args: argparse.Namespace, questions: list[str]) -> None:
    """Streaming: time to the decision, to the first token and to the end, per concurrency (batched server)."""
    from tests.serving import ServerProcess

    common = ["--threshold", str(args.threshold), "--log_level", "warning", "--max_tokens", str(args.max_tokens)]
    server = ServerProcess(args.model, *common, *SERVERS["batched"])
    rows = []
    try:
        for index in range(args.warmup):
            streamed(server, questions[index % len(questions)], args.max_tokens)
        for concurrency in args.concurrency:
            times: list[dict[str, float]] = []
            in_threads(concurrency, args.requests, lambda i: times.append(
                streamed(server, questions[i % len(questions)], args.max_tokens)))
            column = {key: [t[key] for t in times] for key in ("decision", "first_token", "done")}
            rows.append([concurrency, round(percentile(column["decision"], 0.5), 3),
                         round(percentile(column["first_token"], 0.5), 3),
                         round(percentile(column["first_token"], 0.9), 3), round(percentile(column["done"], 0.5), 3)])
    finally:
        server.stop()
    print(f"Streaming (batched server): {args.requests} requests per concurrency, {args.max_tokens} tokens at most.\n")
    print_table(["clients", "decision p50 s", "first token p50 s", "first token p90 s", "done p50 s"], rows)


def run_confidence_scenario(args: argparse.Namespace, questions: list[str]) -> None:
    """`POST /v1/confidence`: questions scored per second and p50 latency, per concurrency (batched server)."""
    from tests.serving import ServerProcess

    server = ServerProcess(args.model, "--threshold", str(args.threshold), "--log_level", "warning",
                           *SERVERS["batched"])
    per_request, rows = args.questions_per_request, []

    def ask(index: int, latencies: list[float]) -> None:
        batch = [questions[(index * per_request + k) % len(questions)] for k in range(per_request)]
        start = time.perf_counter()
        status, reply, _ = server.post("/confidence", {"questions": batch})
        latencies.append(time.perf_counter() - start)
        if status != 200:
            raise SystemExit(f"A /v1/confidence request failed: {status}: {reply}")

    try:
        for index in range(args.warmup):
            ask(index, [])
        for concurrency in args.concurrency:
            latencies: list[float] = []
            wall = in_threads(concurrency, args.requests, lambda i: ask(i, latencies))
            rows.append([concurrency, round(args.requests * per_request / wall, 1),
                         round(percentile(latencies, 0.5), 3)])
    finally:
        server.stop()
    print(f"POST /v1/confidence (batched server): {args.requests} requests of {per_request} questions per "
          "concurrency.\n")
    print_table(["clients", "questions/s", "p50 s"], rows)


def maximal_questions(model: str, count: int, tokens: int, filler: list[str]) -> list[str]:
    """`count` distinct questions whose confidence prompts (`model`'s saved prompt and tokenizer) hold at most `tokens`
    in all, each as long as its share allows (words of `filler` after a number)."""
    from elical_hf.settings.configuration import CONFIDENCE_CONFIG_NAME, ConfidenceConfig
    from elical_hf.models.default_model import resolve_model_path
    from elical_hf.data.encoding import load_tokenizer

    config = ConfidenceConfig.from_json_file(os.path.join(model, CONFIDENCE_CONFIG_NAME))
    tokenizer = load_tokenizer(model, fallback=resolve_model_path(config.base_model_name_or_path)[0])
    words = " ".join(filler).split()

    def length(text: str) -> int:
        return len(tokenizer(config.format_prompt(text, tokenizer), add_special_tokens=False)["input_ids"])

    share, out = tokens // count, []
    for i in range(count):
        low, high = 0, len(words)  # the most filler words that keep the prompt within its share
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if length(f"{i}. {' '.join(words[:middle])}") <= share else (low, middle - 1)
        out.append(f"{i}. {' '.join(words[:low])}")
    return out


def run_heavy_scenario(args: argparse.Namespace, questions: list[str]) -> None:
    """Short requests on the idle server, beside a maximal `/v1/confidence` request, and beside streams with the
    longest stop strings (the batched server with its default limits)."""
    from elical_hf.serve.confidence import MAX_CONFIDENCE_TOKENS
    from elical_hf.serve.engine import MAX_QUESTIONS, MAX_TOKENS_LIMIT
    from elical_hf.serve.schema import MAX_STOP_LENGTH, MAX_STOP_STRINGS
    from tests.serving import ServerProcess

    count, tokens = args.heavy_questions or MAX_QUESTIONS, args.heavy_tokens or MAX_CONFIDENCE_TOKENS
    stream_tokens = args.heavy_stream_tokens or MAX_TOKENS_LIMIT
    many = maximal_questions(args.model, count, tokens, questions * 8)
    counting = ", ".join(str(i) for i in range(1, 2000))
    stops = [counting[: MAX_STOP_LENGTH - 1 - k] + "#" for k in range(MAX_STOP_STRINGS)]  # held back, never met

    def confidence() -> None:
        status, reply, _ = server.post("/confidence", {"questions": many})
        if status != 200:
            raise SystemExit(f"The /v1/confidence request failed: {status}: {reply}")

    heavies = {"idle": None, f"/v1/confidence, {count} questions, ~{tokens} tokens": confidence,
               f"stream, {MAX_STOP_STRINGS} stops of {MAX_STOP_LENGTH} chars, {stream_tokens} tokens":
               lambda: streamed(server, LONG_QUESTION, stream_tokens, stop=stops)}
    print(f"Short beside heavy: {args.short_clients} client(s) each ask {args.short_requests} questions of "
          f"max_tokens={args.short_tokens}, {args.long_head_start:g} s after the heavy client starts; "
          f"{args.rounds} round(s).\n")
    server = ServerProcess(args.model, "--threshold", str(args.threshold), "--log_level", "warning",
                           *SERVERS["batched"])
    cells: dict[str, list[dict[str, float]]] = {}
    try:
        if args.warmup:
            load_round(server, questions, 1, args.warmup, args.short_tokens)
        for _ in range(args.rounds):
            for name, heavy in heavies.items():
                cells.setdefault(name, []).append(short_beside(server, questions, heavy, args))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=30) as response:
            health = json.loads(response.read())["batching"]
    finally:
        server.stop()
    rows = [[name, *(round(statistics.median(cell[key] for cell in runs), 3) for key in ("p50", "p95", "heavy")),
             sum(cell["longs"] for cell in runs)] for name, runs in cells.items()]
    print_table(["beside", "short p50 s", "short p95 s", "heavy request s", "heavy requests"], rows)
    print(f"\nbatching counts: {health}")


def run_long_scenario(args: argparse.Namespace, questions: list[str]) -> None:
    """The long-beside-short table: the short requests' latency with the server's token limit and without it."""
    from elical_hf.serve.engine import MAX_TOKENS_LIMIT
    from tests.serving import ServerProcess

    limit = args.max_tokens_limit or MAX_TOKENS_LIMIT
    if args.long_tokens <= limit:
        raise SystemExit(f"--long_tokens ({args.long_tokens}) must exceed the limit ({limit}) to compare the two.")
    common = ["--threshold", str(args.threshold), "--log_level", "warning", "--max_tokens",
              str(min(args.max_tokens, limit))]
    settings = {f"limit {limit}": (limit, ["--max_tokens_limit", str(limit)]),
                "no limit": (args.long_tokens, ["--max_tokens_limit", str(args.long_tokens)])}
    print(f"Long beside short: one client asks for up to {args.long_tokens} tokens again and again; after "
          f"{args.long_head_start:g} s, {args.short_clients} client(s) each ask {args.short_requests} questions of "
          f"max_tokens={args.short_tokens}; {args.rounds} round(s).\n")
    servers = {name: ServerProcess(args.model, *common, *extra) for name, (_, extra) in settings.items()}
    try:
        for server in servers.values():
            if args.warmup:
                load_round(server, questions, 1, args.warmup, args.short_tokens)
        cells: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.rounds):
            for name, server in servers.items():
                cells.setdefault(name, []).append(long_beside_short(server, questions, settings[name][0], args))
    finally:
        for server in servers.values():
            server.stop()
    medians = {name: {key: statistics.median(cell[key] for cell in runs) for key in ("p50", "p95", "longs")}
               for name, runs in cells.items()}
    print_table(["server", "long max_tokens", "short p50 s", "short p95 s", "long answers"],
                [[name, settings[name][0], round(m["p50"], 3), round(m["p95"], 3), m["longs"]]
                 for name, m in medians.items()])
    print()
    capped, free = medians[f"limit {limit}"]["p50"], medians["no limit"]["p50"]
    print(f"short requests beside a long one, median latency: {capped:.3f} s with limit {limit}, {free:.3f} s "
          f"without ({free / capped:.2f}x)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=STAGE1, help="A saved confidence model (default: the shipped stage-1 "
                        "adapter on the embedded SmolLM2-135M-Instruct).")
    parser.add_argument("--threshold", type=float, default=0.0, help="The gate's threshold (0: answer all).")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=48, help="Timed requests per round.")
    parser.add_argument("--warmup", type=int, default=4, help="Untimed requests per server first.")
    parser.add_argument("--rounds", type=int, default=1, help="Rounds per (server, concurrency); medians reported.")
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--scenario", choices=["load", "long", "both", "stream", "confidence", "heavy"], nargs="+",
                        default=["load"], help="load: the concurrency table; long: short requests beside a long "
                        "one; both: load and long; stream: streaming's time to the first token; confidence: "
                        "/v1/confidence's questions/s; heavy: short requests beside a maximal /v1/confidence "
                        "request and beside the longest stop strings. Several run one after another.")
    parser.add_argument("--heavy_questions", type=int, default=None,
                        help="Questions of the maximal /v1/confidence request (heavy; default: --max_questions, 256).")
    parser.add_argument("--heavy_tokens", type=int, default=None, help="Prompt tokens they fill (heavy; default: "
                        "--max_confidence_tokens, 32768).")
    parser.add_argument("--heavy_stream_tokens", type=int, default=None, help="max_tokens of the streams with stop "
                        "strings (heavy; default: --max_tokens_limit, 256).")
    parser.add_argument("--questions_per_request", type=int, default=16,
                        help="Questions per /v1/confidence request (confidence).")
    parser.add_argument("--long_tokens", type=int, default=1000, help="What the long client asks for (long).")
    parser.add_argument("--max_tokens_limit", type=int, default=None,
                        help="The limited server's --max_tokens_limit (default: the server's default, 256).")
    parser.add_argument("--short_tokens", type=int, default=4, help="What each short request asks for (long).")
    parser.add_argument("--short_clients", type=int, default=2, help="Clients sending short requests (long).")
    parser.add_argument("--short_requests", type=int, default=8, help="Short requests per client (long).")
    parser.add_argument("--long_head_start", type=float, default=2.0,
                        help="Seconds the long client runs before the short ones start (long).")
    args = parser.parse_args(argv)

    from elical_hf.data.questions import load_bundled_questions
    from tests.serving import ServerProcess

    print_machine()
    print(f"CPU (lscpu): {lscpu_model()}")
    questions = [row["question"].strip() for row in load_bundled_questions("nq", max(args.requests, 16))]
    scenarios = set(args.scenario) | ({"load", "long"} if "both" in args.scenario else set())
    for name, run in (("long", run_long_scenario), ("stream", run_stream_scenario),
                      ("confidence", run_confidence_scenario), ("heavy", run_heavy_scenario)):
        if name in scenarios:
            print(f"{args.model}; threshold {args.threshold:g}.")
            run(args, questions)
            print()
    if "load" not in scenarios:
        return
    print(f"{args.model}; threshold {args.threshold:g}; {args.requests} requests per round, {args.max_tokens} tokens "
          f"at most; {args.rounds} round(s) per cell.\n")
    common = ["--threshold", str(args.threshold), "--log_level", "warning", "--max_tokens", str(args.max_tokens)]
    servers = {name: ServerProcess(args.model, *common, *extra) for name, extra in SERVERS.items()}
    try:
        for server in servers.values():
            if args.warmup:
                load_round(server, questions, 1, args.warmup, args.max_tokens)
        cells: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(args.rounds):
            for concurrency in args.concurrency:
                for name, server in servers.items():  # the two servers take turns
                    cells.setdefault((name, concurrency), []).append(
                        load_round(server, questions, concurrency, args.requests, args.max_tokens))
    finally:
        for server in servers.values():
            server.stop()

    def median(name: str, concurrency: int, key: str) -> float:
        return statistics.median(cell[key] for cell in cells[(name, concurrency)])

    rows = []
    for concurrency in args.concurrency:
        for name in servers:
            rows.append([name, concurrency, round(median(name, concurrency, "rps"), 2),
                         round(median(name, concurrency, "p50"), 3), round(median(name, concurrency, "p95"), 3)])
    print_table(["server", "clients", "requests/s", "p50 s", "p95 s"], rows)
    print()
    ratios = []
    for concurrency in args.concurrency:
        ratio = median("batched", concurrency, "rps") / median("one at a time", concurrency, "rps")
        p95 = median("batched", concurrency, "p95") / median("one at a time", concurrency, "p95")
        ratios.append(f"{concurrency} clients: {ratio:.2f}x requests/s, {p95:.2f}x p95")
    print("batched / one at a time: " + "; ".join(ratios))


if __name__ == "__main__":
    main()
