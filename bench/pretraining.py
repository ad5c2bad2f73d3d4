"""Pretraining step throughput: our ELECTRA step against transformers' models composed the obvious way.

    python -m bench pretraining [--preset small] [--batch-size 8] [--repeats 5]

Same sizes both sides (the preset's discriminator, generator at 1/4 hidden, shared embeddings), the same random
batch, masking, AdamW, fp32, one full step each. The baseline: `ElectraForMaskedLM(labels=...)` (vocabulary logits
at every position, eager attention) then `ElectraForPreTraining(labels=...)`. Ours projects onto the vocabulary
only at the masked positions and uses scaled-dot-product attention; ours with eager attention separates the two.
Interleaved repeats, medians; one torch thread by default and the ratio from the process's CPU time per step
(the machine is shared), wall-clock medians beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# This file is named like the package it measures: put the repo root ahead of bench/ on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

from bench import harness as h
from pretraining.config import PRESETS, TrainConfig
from pretraining.model import ElectraPretrainer, SdpaSelfAttention, generator_config, mask_tokens

PAD, CLS, SEP, MASK = 0, 101, 102, 103  # BERT's ids


class Composition(torch.nn.Module):
    """The straightforward version: transformers' two models, their own losses, all-position logits."""

    def __init__(self, disc_config: ElectraConfig, generator_ratio: float):
        super().__init__()
        self.discriminator = ElectraForPreTraining(disc_config)
        self.generator = ElectraForMaskedLM(generator_config(disc_config, generator_ratio))
        self.generator.electra.embeddings = self.discriminator.electra.embeddings
        self.generator.generator_lm_head.weight = self.discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask):
        maskable = attention_mask.bool() & (input_ids != CLS) & (input_ids != SEP)
        m = mask_tokens(input_ids, maskable, 0.15, MASK, self.discriminator.config.vocab_size, 0.85, 0.0)
        masked, chosen = m.ids, m.chosen
        gen = self.generator(masked, attention_mask=attention_mask, labels=input_ids.masked_fill(~chosen, -100))
        with torch.no_grad():
            probs = F.softmax(gen.logits[chosen].float(), -1)
            fake = input_ids.clone()
            fake[chosen] = torch.multinomial(probs, 1).squeeze(1)
        disc = self.discriminator(fake, attention_mask=attention_mask, labels=(fake != input_ids).long())
        return gen.loss + 50.0 * disc.loss


def make_batch(batch_size: int, seq_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch_size, seq_len), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    return ids, torch.ones_like(ids)


def step_fn(model, optimizer, ids, attention, autocast=contextlib.nullcontext, sums=None, on_device=False):
    """One training step as a closure; `sums` (bench/gpu.py) adds up the step's statistics, on the device or read
    back every step."""
    def step():
        with autocast():
            out = model(ids, attention)
        loss = out if isinstance(out, torch.Tensor) else out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for k, v in ({} if sums is None or isinstance(out, torch.Tensor) else out.stats).items():
            sums[k] = sums.get(k, 0.0) + (v.detach().double() if on_device else float(v))

    return step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", choices=list(PRESETS))
    parser.add_argument("--batch-size", type=int, default=8, help="the preset's batch is 128; 8 fits a 2-core CPU")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time is the step's cost)")
    parser.add_argument("--output", default=h.RESULTS / "pretraining.json")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = TrainConfig.from_dict({**PRESETS[args.preset], "corpus": ["-"], "output": "-", "preset": args.preset})
    disc_config = ElectraConfig(
        vocab_size=args.vocab_size, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings)
    ids, attention = make_batch(args.batch_size, args.seq_len, args.vocab_size)

    def ours(sdpa: bool):
        torch.manual_seed(0)
        return ElectraPretrainer(disc_config, generator_ratio=cfg.generator_ratio, mask_token_id=MASK,
                                 special_token_ids=[PAD, CLS, SEP, MASK], sdpa=sdpa)

    torch.manual_seed(0)
    models = {"ours": ours(True), "transformers composition": Composition(disc_config, cfg.generator_ratio),
              "ours, eager attention": ours(False)}
    assert any(isinstance(m, SdpaSelfAttention) for m in models["ours"].modules())
    steps = {}
    for name, model in models.items():
        model.train()
        steps[name] = step_fn(model, torch.optim.AdamW(model.parameters(), lr=1e-4), ids, attention)
        steps[name]()  # warm-up: allocator, optimizer state
    cpu: dict[str, list[float]] = {name: [] for name in models}
    wall: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, step in steps.items():
            c0, w0 = time.process_time(), time.perf_counter()
            step()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)

    tokens = args.batch_size * args.seq_len
    base = statistics.median(cpu["transformers composition"])
    rows = []
    for name in models:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        rows.append({"variant": name, "median_cpu_s": round(c, 3), "tokens_per_cpu_s": round(tokens / c, 1),
                     "speedup_vs_transformers": round(base / c, 3), "median_wall_s": round(w, 3),
                     "tokens_per_wall_s": round(tokens / w, 1), "cpu_s": [round(t, 3) for t in cpu[name]],
                     "wall_s": [round(t, 3) for t in wall[name]]})
    print(f"\nELECTRA-{args.preset} pretraining step (forward, backward, AdamW), batch {args.batch_size} x "
          f"{args.seq_len} tokens (REDUCED from the preset's {cfg.batch_size}), vocab {args.vocab_size}, fp32 CPU, "
          f"{torch.get_num_threads()} thread(s), median of {args.repeats} interleaved repeats\n")
    print(f"| {'variant':<26} | CPU s/step | tokens per CPU s | vs transformers | wall s/step (shared machine) |")
    print(f"|{'-' * 28}|------------|------------------|-----------------|------------------------------|")
    for r in rows:
        print(f"| {r['variant']:<26} | {r['median_cpu_s']:>10.2f} | {r['tokens_per_cpu_s']:>16.0f} | "
              f"{r['speedup_vs_transformers']:>14.2f}x | {r['median_wall_s']:>28.2f} |")
    h.write_record(args.output, {
        "preset": args.preset, "batch_size": args.batch_size, "preset_batch_size": cfg.batch_size,
        "seq_len": args.seq_len, "vocab_size": args.vocab_size, "repeats": args.repeats, "precision": "fp32", "ratio_from": "process CPU time",
        "generator_hidden": generator_config(disc_config, cfg.generator_ratio).hidden_size, "rows": rows,
        "environment": {"torch": torch.__version__, "threads": torch.get_num_threads(), "platform": platform.platform()},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
