"""What every benchmark repeats: the record (commit, machine, load before and after) written atomically, timers
and ratios, `python -m app` started and awaited, closed-loop clients on a lean keep-alive HTTP client, and the
random ELECTRA the load benchmarks serve."""
from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], check=False, capture_output=True, text=True).stdout.strip()
    except OSError:  # no git (a lent GPU machine may have none)
        return ""


def _shared_data() -> Path:
    """../shared/data beside the checkout (or, from a git worktree, beside its main checkout); BENCH_DATA (or
    SHARED_DATA) names it elsewhere."""
    named = os.environ.get("BENCH_DATA") or os.environ.get("SHARED_DATA")
    if named:
        return Path(named)
    common = _git("rev-parse", "--path-format=absolute", "--git-common-dir")
    beside = [ROOT.parent / "shared" / "data", *([Path(common).parent.parent / "shared" / "data"] if common else [])]
    return next((p for p in beside if p.is_dir()), beside[0])


DATA = _shared_data()
LOAD_BEFORE = os.getloadavg()  # at import: before the benchmark loaded the machine itself


def machine() -> dict:
    """What the figures depend on: the CPU (INT8 kernels differ: AVX-512 VNNI or AVX2 only), cores, load."""
    flags: set[str] = set()
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    isa = "avx512_vnni" if "avx512_vnni" in flags else "avx2" if "avx2" in flags else "other"
    commit = _git("rev-parse", "--short", "HEAD")
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "load": list(os.getloadavg()),
            "load_before": [round(x, 2) for x in LOAD_BEFORE], "commit": commit, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1000, 3)


def timed(fn, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of fn()."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def ratio(a, b, digits: int = 3):
    return round(a / b, digits) if a is not None and b else None


def write_record(path: Path, figures: dict, quiet: bool = False) -> dict:
    """The figures with the command and the machine they were measured on, written so a killed run leaves no
    half file."""
    record = {"machine": machine(), "command": " ".join(["python -m bench", Path(sys.argv[0]).stem, *sys.argv[1:]]),
              **figures}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, ensure_ascii=False, default=_plain)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if not quiet:
        print(f"wrote {path}")
    return record


def _plain(o):
    """Paths and numpy values as JSON; anything else is refused (no silent str() of an object)."""
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON: {type(o).__name__}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_env(code: Path = ROOT, **extra) -> dict:
    """The server's environment: our tree first on the path, no API key or database from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if k not in ("ELECTRA_API_KEY", "DATABASE_URL")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])),
               GRADIO_ANALYTICS_ENABLED="False", **extra)
    return env


def wait_ready(proc: subprocess.Popen, url: str, log: Path, timeout: float = 900, headers=None) -> float:
    """Seconds until `url`/readyz answers 200 (a loaded machine: imports and warm-up took over 5 minutes at
    load 20); SystemExit if the process exits first or the time runs out."""
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url + "/readyz", timeout=2, headers=headers).status_code == 200:
                return time.monotonic() - t0
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"server not ready after {timeout:g} s; see {log}")


def start_server(model: Path | None, extra: list[str], log: Path, port: int | None = None, code: Path = ROOT,
                 env: dict | None = None, headers=None) -> tuple[subprocess.Popen, str]:
    """`python -m app --no-ui` on `model`, or (None) on what `extra` names, once /readyz answers: (process, url).
    `--ui` in `extra` keeps the UI on."""
    port = port or free_port()
    ui = [] if "--ui" in extra else ["--no-ui"]
    argv = [sys.executable, "-m", "app", *(["--model", str(model)] if model else []), *ui, "--port", str(port),
            "--log-level", "warning", *[x for x in extra if x != "--ui"]]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env or app_env(code), cwd=log.parent)
    url = f"http://127.0.0.1:{port}"
    wait_ready(proc, url, log, headers=headers)
    return proc, url


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def batch_stats(url: str) -> tuple[float, float]:
    """(texts, batches) the server has formed so far, from /metrics."""
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text

    def value(name):
        m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        return float(m.group(1)) if m else 0.0

    return value("app_batch_size_texts_sum"), value("app_batch_size_texts_count")


class Connection:
    """A minimal HTTP/1.1 keep-alive client: the load generator shares the 2 cores with the server, and httpx
    spent 5.9 ms of CPU a label save (bench/team_labels.py), about as much as the server: it would cap what is
    measured. It speaks only what the app answers: a status line, headers, a Content-Length body."""

    def __init__(self, host: str, port: int, timeout: float = 30.0, headers: dict[str, str] | None = None):
        self.host, self.port, self.timeout = host, port, timeout
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader = self.writer = None
        self.last_headers = b""  # the last response's head (bench/stage_report.py reads Server-Timing)
        self.last_body = b""

    @classmethod
    def to(cls, url: str, **kw) -> Connection:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return cls(host, int(port), **kw)

    async def post_json(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n{self.extra}"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        try:
            return await asyncio.wait_for(self._response(), self.timeout)
        except BaseException:
            self.close()  # a half-read response would corrupt the next one
            raise

    async def post(self, path: str, body=None) -> tuple[int, object]:
        """(status, parsed JSON or None); ConnectionError when the server is gone (the next call reconnects)."""
        try:
            status = await self.post_json(path, b"" if body is None else json.dumps(body).encode())
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            raise ConnectionError(str(e) or type(e).__name__) from None
        return status, json.loads(self.last_body) if self.last_body else None

    async def _response(self) -> int:
        headers = self.last_headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(headers[9:12])
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", headers)
        self.last_body = await self.reader.readexactly(int(m.group(1))) if m else b""
        if re.search(rb"(?i)\r\nconnection: *close", headers):
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def sequential(url: str, body: bytes, n: int, warmup: int) -> tuple[list[float], list[bytes]]:
    """One client posting `body` to /v1/classify warmup + n times, each after the last answer: the seconds and the
    response heads of the last n; SystemExit on an answer other than 200."""
    conn, times, heads = Connection.to(url, timeout=60), [], []
    try:
        for i in range(warmup + n):
            start = time.perf_counter()
            status = await conn.post_json("/v1/classify", body)
            if status != 200:
                raise SystemExit(f"HTTP {status} from {url}")
            if i >= warmup:
                times.append(time.perf_counter() - start)
                heads.append(conn.last_headers)
    finally:
        conn.close()
    return times, heads


def percentiles(latencies_s: list[float], qs=(50, 99), digits: int = 1) -> dict:
    import numpy as np

    lat = np.array(latencies_s) * 1000
    return {f"p{q}_ms": round(float(np.percentile(lat, q)), digits) if len(lat) else None for q in qs}


async def load(url: str, texts: list[str], clients: int, duration: float, warmup: float = 3, grace: float = 30,
               timeout: float = 60, samples: list | None = None, beside=None) -> dict:
    """Closed-loop clients, each sending the next text as soon as the answer arrives, for `duration` after
    `warmup`. `samples` gets (start, end, ok) of every measured request; `beside(measure_from, stop_at)` is a
    coroutine run alongside (swaps, probes)."""
    bodies = [json.dumps({"text": t}, ensure_ascii=False).encode() for t in texts]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = answered = 0
    rng = random.Random(1)
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def client():
        nonlocal sent, answered
        conn = Connection.to(url, timeout=timeout)
        while time.perf_counter() < stop_at:
            body = rng.choice(bodies)
            t0 = time.perf_counter()
            sent += 1
            try:
                status = await conn.post_json("/v1/classify", body)
                kind = None if status == 200 else f"HTTP {status}"
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
                kind = type(e).__name__
            t1 = time.perf_counter()
            answered += 1
            if kind:
                errors[kind] = errors.get(kind, 0) + 1
            elif measure_from <= t0 and t1 <= stop_at:
                latencies.append(t1 - t0)
            if samples is not None and (kind or (measure_from <= t0 and t1 <= stop_at)):
                samples.append((t0, t1, kind is None))
        conn.close()

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    if beside is not None:
        tasks.append(asyncio.create_task(beside(measure_from, stop_at)))
    await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for t in pending:
        t.cancel()
    return {"requests": len(latencies), "rps": round(len(latencies) / duration, 1), **percentiles(latencies),
            "errors": sum(errors.values()), "error_kinds": errors, "unanswered": sent - answered}


KO_HELP = DATA / "ko-help" / "train.csv"
MAX_LENGTH = 128
SHAPES = {  # ELECTRA-Small; and a much smaller one where per-call overhead, not arithmetic, dominates
    "small": {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4,
              "intermediate_size": 1024},
    "mini": {"embedding_size": 64, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 256},
}


def load_texts() -> tuple[list[str], list[str]]:
    """ko-help's paragraphs and labels; without the shared data, Korean-ish sentences of their typical length."""
    if KO_HELP.exists():
        import pandas as pd

        df = pd.read_csv(KO_HELP, dtype=str, keep_default_na=False)
        return df["text"].tolist(), sorted(df["label"].unique())
    rng = random.Random(0)
    syllables = "가나다라마바사아자차카타파하오늘내일회의메모오류기록설정파일저장열기대화상자"
    texts = [" ".join("".join(rng.choices(syllables, k=rng.randint(2, 5))) for _ in range(rng.randint(4, 14)))
             for _ in range(2000)]
    return texts, ["sbasic", "scalc", "schart", "sdraw", "shared", "simpress", "smath", "swriter"]


def build_model(work: Path, texts: list[str], labels: list[str], backend: str, shape: str) -> Path:
    """An ELECTRA classifier of `shape` with random weights (they cost what trained ones do) and a WordPiece
    vocabulary trained on `texts`, cached in `work`: the transformers folder (backend torch) or its INT8 export."""
    work = work / shape
    model_dir, onnx_dir = work / "model", work / "onnx"
    if not (model_dir / "config.json").exists():
        import torch
        from tokenizers import BertWordPieceTokenizer
        from transformers import ElectraConfig, ElectraForSequenceClassification, ElectraTokenizerFast

        model_dir.mkdir(parents=True, exist_ok=True)
        corpus = work / "corpus.txt"
        corpus.write_text("\n".join(texts), encoding="utf-8")
        wp = BertWordPieceTokenizer(clean_text=True, strip_accents=False, lowercase=False)
        wp.train([str(corpus)], vocab_size=8000, min_frequency=2)
        wp.save_model(str(model_dir))
        tok = ElectraTokenizerFast(vocab_file=str(model_dir / "vocab.txt"), do_lower_case=False, strip_accents=False,
                                   model_max_length=MAX_LENGTH)
        tok.save_pretrained(model_dir)
        cfg = ElectraConfig(vocab_size=len(tok), **SHAPES[shape], max_position_embeddings=512,
                            num_labels=len(labels), id2label=dict(enumerate(labels)),
                            label2id={k: i for i, k in enumerate(labels)})
        torch.manual_seed(0)
        ElectraForSequenceClassification(cfg).save_pretrained(model_dir)
    if backend == "torch":
        return model_dir
    if not (onnx_dir / "model_quantized.onnx").exists():
        print("exporting to ONNX (once; cached)...", flush=True)
        # random weights put the labels in a near-tie, so INT8 may pick other argmaxes: parity is not measured
        subprocess.run([sys.executable, "-m", "serving.export", "--model", str(model_dir), "--output", str(onnx_dir),
                        "--quantize", "--min-agreement", "0.001"], check=True, cwd=ROOT, env=app_env())
    return onnx_dir
