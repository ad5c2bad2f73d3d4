"""Pretrain an ELECTRA discriminator by replaced token detection.

    python pretraining/train.py --corpus corpus.txt --tokenizer tok/ --preset small --output runs/electra-small

Without --tokenizer, a WordPiece vocabulary is trained on the corpus first (--vocab-size, default sized to
the corpus). Task-adaptive pretraining: continue from a pretrained discriminator on your own text,

    python pretraining/train.py --init-from runs/electra-small --corpus notes.csv --text-column text \\
        --max-steps 1000 --warmup-steps 100 --lr 5e-4 --batch-size 32 --output runs/electra-notes

which takes the model shape and vocabulary from the folder (a run folder or a discriminator folder; the
generator beside it is reused when there is one). Every config
field is a flag (`python pretraining/train.py --help`); continue a stopped run with the same command
plus --resume. Several GPUs: `accelerate launch pretraining/train.py ...` (the global batch is split).

OUTPUT/discriminator/  ElectraForPreTraining + tokenizer: what finetune/ loads
OUTPUT/generator/      ElectraForMaskedLM + tokenizer (for objective mlm: the discriminator-sized MLM)
OUTPUT/config.json, log.jsonl, rtd_accuracy.png, checkpoint.pt (the latest, for --resume)
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # flags and paths checked before torch loads: --help or a typo answers in a second
    try:
        from pretraining.config import PRESETS, check_command_line
    except ModuleNotFoundError as e:  # run outside the project's environment
        sys.exit(f"error: {e}: activate the project's venv (source .venv/bin/activate) or install it: pip install -e .")
    check_command_line(sys.argv[1:], __doc__ + f"\npresets: {', '.join(PRESETS)}")

import dataclasses
import json
import math
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from pretraining.config import (
    PRESETS,
    TrainConfig,
    UsageError,
    build_parser,
    config_from_args,
    exits_2_on_usage_error,
    resume_differences,
)
from pretraining.corpus import Blocks, build_cache, check_corpus, corpus_as_text
from pretraining.cpu_limits import omp_threads, plan_threads
from pretraining.e5 import RECIPE
from pretraining.init_from import init_source, load_init, resolve_init
from pretraining.logbook import Logbook, plot_rtd_curve, summarize
from pretraining.model import ElectraPretrainer
from pretraining.tokenizer import load_tokenizer, resolve_vocab_size, train_tokenizer


# Twin of textdata.numerics.lr_at (pretraining imports no other package): tests/textdata/test_twins.py
def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then linear decay to 0 at max_steps (ELECTRA's schedule, power 1)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * max(0.0, (cfg.max_steps - step) / max(1, cfg.max_steps - cfg.warmup_steps))


def seed_step(cfg: TrainConfig, step: int, rank: int) -> None:
    """Masking, sampling and dropout draw from the global RNGs, reseeded from (seed, step, rank) every step:
    a resumed run, on any number of processes, draws exactly what the uninterrupted run drew."""
    seed = (cfg.seed * 1_000_003 + step * 97 + rank) % 2**63
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def build_model(cfg: TrainConfig, tokenizer) -> ElectraPretrainer:
    from transformers import ElectraConfig

    disc_config = ElectraConfig(
        vocab_size=len(tokenizer), embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings,
        hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout, pad_token_id=tokenizer.pad_token_id)
    special = [tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id]
    return ElectraPretrainer(disc_config, generator_ratio=cfg.generator_ratio, objective=cfg.objective,
                             mask_prob=cfg.mask_prob, disc_weight=cfg.disc_weight,
                             mask_token_id=tokenizer.mask_token_id, special_token_ids=special)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    # No decay on biases and LayerNorm, as in BERT and ELECTRA.
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


# Twin of textdata.numerics.resolve_dtype (pretraining imports no other package): tests/textdata/test_twins.py
def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype:
    """The autocast dtype for cfg.precision on `device`: bf16 (fp16 without bf16) on CUDA under auto, else fp32."""
    if cfg.precision == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if cfg.precision == "fp16" and device.type != "cuda":
        raise UsageError("fp16 needs CUDA; use --precision fp32 or bf16 on CPU")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.precision]


# Options for torch.compile; the CPU test swaps in a cheaper backend. fullgraph: every step has the same
# shapes (fixed blocks, fixed masked-position slots), so a graph break would be a regression, not a fallback.
COMPILE_OPTIONS: dict = {"dynamic": False, "fullgraph": True}


def check_compile_device(cfg: TrainConfig, device: torch.device) -> None:
    if cfg.compile == "graphs" and device.type != "cuda":
        raise UsageError(f"--compile graphs replays CUDA graphs and needs a CUDA device, not {device.type}")


def compile_model(model: ElectraPretrainer, cfg: TrainConfig, device: torch.device, probe) -> bool:
    """torch.compile the whole forward (masking, both encoders, sampling, losses) in place: one graph, so the
    small ops around the encoders fuse instead of launching one kernel each. state_dict keys are unchanged.
    `probe()` runs one forward and backward, so both graphs compile here rather than inside the loop; if that
    fails under --compile auto, the run goes on eagerly with a warning (on and graphs raise)."""
    if cfg.compile == "off" or (cfg.compile == "auto" and device.type != "cuda"):
        return False
    check_compile_device(cfg, device)
    if cfg.compile == "graphs":  # the step replayed as CUDA graphs: one launch instead of one per kernel
        model.compile(**COMPILE_OPTIONS, mode="reduce-overhead")
    else:
        model.compile(**COMPILE_OPTIONS)
    try:
        probe()
    except Exception as e:  # any compiler failure: eager is the same computation
        if cfg.compile != "auto":
            raise
        model._compiled_call_impl = None  # what nn.Module.compile set: calls go to forward again
        why = " ".join([line.strip() for line in str(e).splitlines() if line.strip()][:2])  # dynamo: "backend
        # 'inductor' raised:" and then the cause
        print(f"warning: --compile auto: compiling the step failed ({type(e).__name__}: {why[:300]}); "
              "training eagerly", file=sys.stderr)
        return False
    return True


def save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a kill mid-save leaves the previous checkpoint intact


def export(model: ElectraPretrainer, tokenizer, out: Path, init_folder: Path | None = None) -> None:
    """Hand-off folders: plain transformers classes, safetensors, tokenizer beside the weights; a discriminator
    continued from an encoder keeps that encoder's fine-tuning recipe (the same network, further trained)."""
    folders = {"discriminator": model.discriminator, "generator": model.generator or model.mlm}
    if model.generator is not None and model.mlm is not None:
        folders["mlm"] = model.mlm
    for name, module in folders.items():
        module.save_pretrained(out / name, safe_serialization=True)
        tokenizer.save_pretrained(out / name)
    if init_folder is not None and (Path(init_folder) / RECIPE).is_file():
        shutil.copyfile(Path(init_folder) / RECIPE, out / "discriminator" / RECIPE)


def prepare_tokenizer(cfg: TrainConfig, out: Path, is_main: bool, wait, corpus=None, init_folder=None):
    if init_folder or cfg.tokenizer:
        return load_tokenizer(init_folder or cfg.tokenizer)
    corpus = list(corpus or cfg.corpus)
    folder = out / "tokenizer"
    if is_main and not (folder / "tokenizer.json").exists():
        size = resolve_vocab_size(cfg.vocab_size, corpus)
        print(f"no --tokenizer: training a {size}-token WordPiece vocabulary in {folder}"
              f"{' (sized to the corpus)' if cfg.vocab_size is None else ''}", file=sys.stderr)
        train_tokenizer(corpus, size, folder, max_length=cfg.max_position_embeddings)
    wait()
    return load_tokenizer(folder)


def cpu_threads(device: torch.device, processes: int = 1, report: bool = True) -> None:
    """On CPU, one torch thread per core this process may use that other work does not keep busy, shared among the
    processes of a CPU launch (an explicit OMP_NUM_THREADS wins): beside one CPU-bound process, 2 threads on 2
    cores ran 4.6-9.9x slower than 1."""
    if device.type == "cpu" and omp_threads() is None:
        plan = plan_threads()
        torch.set_num_threads(max(1, plan.threads // processes))
        if report:
            print(f"torch threads: {torch.get_num_threads()} ({plan.why})", file=sys.stderr)


def train(cfg: TrainConfig) -> Path:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs
    from tqdm import tqdm

    # Two-stage leaves half the parameters without gradients in each stage; DDP must be told.
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=cfg.two_stage)])
    device, rank, world = accelerator.device, accelerator.process_index, accelerator.num_processes
    is_main = accelerator.is_main_process
    out = Path(cfg.output)
    ckpt_path = out / "checkpoint.pt"

    cfg, init, corpus, saved = check_inputs(cfg, device, world, out, ckpt_path)
    tokenizer, blocks = prepare_data(cfg, out, accelerator, corpus, init)
    cpu_threads(device, world, report=is_main)  # after the input checks: an error stays the only line
    model, optimizer, dtype, scaler = model_and_optimizer(cfg, tokenizer, init, saved, device)
    switch_step = cfg.max_steps // 2 if cfg.two_stage else None

    step, position, stats = 0, 0, StepStats()
    if saved is not None:
        step, position, stats = restore(saved, model, optimizer, scaler, switch_step)
        del saved

    local = cfg.batch_size // world

    def batch_at(position: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = blocks.batch(position, cfg.batch_size)[rank * local:(rank + 1) * local]
        input_ids = torch.from_numpy(rows)
        # Pinned memory: the copy is queued behind the previous step instead of waiting for it to finish.
        input_ids = input_ids.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else input_ids
        return input_ids, (input_ids != tokenizer.pad_token_id).long()

    def probe():  # one step's forward and backward, no update; the loop reseeds its RNGs every step
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            result = model(*batch_at(position))
        result.loss.backward()
        optimizer.zero_grad(set_to_none=True)

    compiled = compile_model(model, cfg, device, probe)
    # DDP where there are several processes; on one device this only places the model.
    model = accelerator.prepare_model(model)
    raw = accelerator.unwrap_model(model)
    if is_main:
        write_run_config(cfg, out, init, used={"vocab_size_used": len(tokenizer), "n_blocks": len(blocks),
                                               "processes": world, "autocast": str(dtype), "compiled": compiled})
    log = Logbook(out, resume_step=step if cfg.resume else None) if is_main else None
    last_stop = min(cfg.max_steps, cfg.stop_after or cfg.max_steps)
    bar = tqdm(total=cfg.max_steps, initial=step, unit="step", dynamic_ncols=True, disable=not is_main)

    def checkpoint():
        if is_main:
            save_checkpoint(ckpt_path, {
                "model": raw.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "step": step, "position": position, "sums": read_sums(stats.sums), "steps_in_sums": stats.steps,
                "config": cfg.to_dict(), "rng": {"scheme": "reseeded from (seed, step, rank)", "seed": cfg.seed}})
            plot_rtd_curve(log.path, out / "rtd_accuracy.png")
        accelerator.wait_for_everyone()

    model.train()  # the loop
    while step < last_stop:
        if step == switch_step:
            raw.start_discriminator_stage()
        seed_step(cfg, step, rank)
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        input_ids, attention_mask = batch_at(position)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            result = model(input_ids, attention_mask)
        scaler.scale(result.loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        position += cfg.batch_size

        stats.add(result.stats, attention_mask.sum() * world)
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            record = stats.line(step, lr, raw.stage)
            if is_main:
                log.write(record)
                bar.set_postfix(loss=f"{record['loss']:.3f}", rtd_acc=record.get("disc_acc"),
                                tok_s=f"{record['tokens_per_s']:.0f}")
        if step % cfg.save_every == 0 or step == last_stop:
            checkpoint()
        bar.update(1)
    bar.close()
    if is_main:
        finish(raw, tokenizer, out, step, cfg.max_steps, log, init[0] if init else None)
    return out


def check_inputs(cfg: TrainConfig, device, world: int, out: Path, ckpt_path: Path):
    """(cfg with an --init-from folder's shape, that folder, the corpus, the checkpoint to resume or None),
    checked before any slow work."""
    check_compile_device(cfg, device)
    corpus = corpus_as_text(cfg.corpus, cfg.text_column, out / "corpus")
    check_corpus(corpus)
    init = init_source(resolve_init(cfg.init_from, corpus, out, cfg.init_vocab)) if cfg.init_from else None
    if init is not None:
        cfg = dataclasses.replace(cfg, **init[2])  # the folder's shape, recorded in config.json and checkpoints
    if cfg.batch_size % world:
        raise UsageError(f"batch size {cfg.batch_size} does not split over {world} processes")
    saved = checkpoint_to_resume(cfg, ckpt_path)
    out.mkdir(parents=True, exist_ok=True)
    return cfg, init, corpus, saved


def model_and_optimizer(cfg: TrainConfig, tokenizer, init, saved, device):
    """(model on `device`, AdamW, autocast dtype, grad scaler); the weights are the same on every process."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, tokenizer)
    if init is not None and saved is None:
        load_init(model, init[0], init[1])
    model = model.to(device)
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.999),
                                  eps=cfg.adam_epsilon, fused=device.type == "cuda")
    dtype = autocast_dtype(cfg, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    if cfg.two_stage:
        model.stage = "generator"
    return model, optimizer, dtype, scaler


def finish(raw, tokenizer, out: Path, step: int, max_steps: int, log, init_folder: Path | None = None) -> None:
    if step >= max_steps:
        export(raw, tokenizer, out, init_folder)
        print(f"saved discriminator and generator to {out}", file=sys.stderr)
    else:
        print(f"stopped at step {step} of {max_steps}; continue with --resume", file=sys.stderr)
    log.close()


def prepare_data(cfg: TrainConfig, out: Path, accelerator, corpus, init):
    """(tokenizer, blocks): the vocabulary (trained, given or the --init-from folder's) and the corpus tokenized
    once into a memory-mapped cache, built by the main process while the others wait."""
    is_main = accelerator.is_main_process
    tokenizer = prepare_tokenizer(cfg, out, is_main, accelerator.wait_for_everyone, corpus, init and init[0])
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else out / "cache"
    if is_main:
        build_cache(corpus, tokenizer, cfg.seq_len, cache_dir)
    accelerator.wait_for_everyone()
    blocks = Blocks(build_cache(corpus, tokenizer, cfg.seq_len, cache_dir), seed=cfg.seed)
    if len(blocks) < cfg.batch_size:
        raise UsageError(f"the corpus gives {len(blocks)} blocks of {cfg.seq_len} tokens, fewer than one batch "
                         f"({cfg.batch_size}); use more text or a smaller --batch-size")
    return tokenizer, blocks


def write_run_config(cfg: TrainConfig, out: Path, init, used: dict) -> None:
    """OUTPUT/config.json: the settings and what the run actually used (vocabulary, blocks, dtype, compile)."""
    record = {**cfg.to_dict(), **used, "tokenizer_used": str(init[0]) if init else cfg.tokenizer or str(out / "tokenizer")}
    if init is not None:
        record["initialized_from"] = {"discriminator": str(init[0]), "generator": str(init[1] or "fresh")}
    (out / "config.json").write_text(json.dumps(record, indent=1))


def checkpoint_to_resume(cfg: TrainConfig, ckpt_path: Path) -> dict | None:
    """With --resume, the checkpoint to continue from, made with this config; a fresh run must not overwrite one."""
    if not cfg.resume:
        if ckpt_path.exists():
            raise UsageError(f"{ckpt_path.parent} already holds a run; add --resume to continue it or choose another "
                             "--output")
        return None
    if not ckpt_path.exists():
        raise UsageError(f"--resume: no checkpoint at {ckpt_path}")
    saved = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    changed = resume_differences(saved["config"], cfg)
    if changed:
        raise UsageError("--resume with a different config: " + "; ".join(changed))
    return saved


def restore(saved: dict, model, optimizer, scaler, switch_step: int | None) -> tuple[int, int, StepStats]:
    """Weights, optimizer and scaler state from a checkpoint; (step, position in the corpus, the statistics
    since the last log line)."""
    step = saved["step"]
    if switch_step is not None and step > switch_step:
        model.start_discriminator_stage()  # before loading: it unties the generator's embeddings
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scaler.load_state_dict(saved["scaler"])
    return step, saved["position"], StepStats(saved["sums"], saved["steps_in_sums"])


class StepStats:
    """Step statistics added up on the device and read once per log line: a read per step would stall the GPU."""

    def __init__(self, sums: dict | None = None, steps: int = 0):
        self.sums, self.steps = dict(sums or {}), steps
        self.tokens, self.t0 = 0, time.perf_counter()

    def add(self, stats: dict, tokens) -> None:
        for key, value in stats.items():
            self.sums[key] = self.sums.get(key, 0.0) + value.detach().double()
        self.steps += 1
        self.tokens += tokens

    def line(self, step: int, lr: float, stage: str) -> dict:
        """The log record for the steps since the last line; starts the next one."""
        host = read_sums(self.sums)
        if not math.isfinite(host["loss"]):
            raise RuntimeError(f"loss is {host['loss']} by step {step}; lower --lr or use --precision fp32")
        elapsed = time.perf_counter() - self.t0
        record = {"step": step, **summarize(host, self.steps), "lr": lr,
                  "tokens_per_s": round(float(self.tokens) / elapsed, 1), "stage": stage}
        self.sums, self.steps, self.tokens, self.t0 = {}, 0, 0, time.perf_counter()
        return record


def read_sums(sums: dict) -> dict[str, float]:
    """Device-side sums (or floats from a checkpoint) as Python floats, in one transfer."""
    if not sums:
        return {}
    device = next((v.device for v in sums.values() if isinstance(v, torch.Tensor)), "cpu")
    values = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device) for v in sums.values()])
    return dict(zip(sums, values.tolist(), strict=True))


@exits_2_on_usage_error
def main(argv=None) -> int:
    parser = build_parser(__doc__ + f"\npresets: {', '.join(PRESETS)}")
    train(config_from_args(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
