"""One fine-tuning run: a pretrained encoder in, a trained classifier out.

Reads top to bottom: batches, learning rate, the loop, early stopping. The recipe is ELECTRA's
(AdamW, linear warmup/decay, layer-wise LR decay, clipping); the speed comes from not padding:
texts are tokenized once, batches hold texts of similar length, and each batch is padded only to
its own longest text.

On a GPU, a batch of ~32 short texts is a few hundred tokens: the step is bound by kernel launches and
host syncs, not arithmetic. So the loop never reads a value back per step (losses stay on the device
and are read once per epoch), inputs are copied from pinned memory without blocking, and
`static_shapes` pads batches to a few fixed (batch_size, width) shapes that `compile` can specialise
once each; padding rows carry label -100, so the loss and gradients are those of the unpadded batch.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from finetune.heads import bce_loss, head_of, start_at_label_priors  # noqa: F401 - where callers found them
from finetune.train_config import COMPILE_CHOICES, SWITCHES, TrainConfig  # noqa: F401 - where callers found them
from textdata.numerics import bucket_widths, lr_at, resolve_dtype

# Options for torch.compile; the CPU test swaps in a cheaper backend.
COMPILE_OPTIONS: dict = {"dynamic": False}


@dataclass
class History:
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_macro_f1: list[float] = field(default_factory=list)
    best_epoch: int = 0
    seconds: float = 0.0
    samples_per_second: float = 0.0


def layer_lr_groups(model, layer_decay: float, weight_decay: float) -> list[dict]:
    """Parameter groups with ELECTRA's layer-wise LR decay: lr * decay**(distance from the head).

    The head has depth L+1 (scale 1), encoder layer i depth i+1, embeddings depth 0. The official
    ELECTRA code puts the head at L+2, so its top layer already gets decay**2: one step too many.
    """
    n_layers = model.config.num_hidden_layers
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if ".embeddings." in f".{name}" or "embeddings_project" in name:
            depth = 0
        elif ".layer." in name:
            depth = int(name.split(".layer.")[1].split(".")[0]) + 1
        else:  # classifier head, pooler
            depth = n_layers + 1
        no_decay = param.ndim < 2  # biases and LayerNorm weights
        group = groups.setdefault((depth, no_decay), {
            "params": [], "lr_scale": layer_decay ** (n_layers + 1 - depth),
            "weight_decay": 0.0 if no_decay else weight_decay,
        })
        group["params"].append(param)
    return list(groups.values())


def encode(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids per text, truncated, no padding (padding happens per batch)."""
    return tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]


def length_grouped_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, mega: int = 50) -> list:
    """Shuffle, then sort within windows of `mega` batches so a batch holds similar lengths.

    Windows keep the order random across the epoch; sorting inside them removes most padding.
    """
    perm = rng.permutation(len(lengths))
    batches = []
    window = batch_size * mega
    for start in range(0, len(perm), window):
        chunk = perm[start:start + window]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def switch_on(value: str, device: torch.device) -> bool:
    return value == "on" or (value == "auto" and device.type == "cuda")


def collate(ids: list[list[int]], rows, pad_id: int, device, width: int | None = None, n_rows: int | None = None) -> dict:
    """Padded tensors for `rows`; `width`/`n_rows` pad further to a fixed shape (extra rows: one real token)."""
    longest = width or max(len(ids[i]) for i in rows)
    n = n_rows or len(rows)
    input_ids = np.full((n, longest), pad_id, dtype=np.int64)
    mask = np.zeros((n, longest), dtype=np.int64)
    mask[len(rows):, 0] = 1
    for j, i in enumerate(rows):
        input_ids[j, : len(ids[i])] = ids[i]
        mask[j, : len(ids[i])] = 1
    return {"input_ids": to_device(input_ids, device), "attention_mask": to_device(mask, device)}


def to_device(array: np.ndarray, device) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if getattr(device, "type", device) != "cuda":
        return tensor
    # From pageable memory a copy waits for the GPU to drain; from pinned memory it is queued like a kernel.
    return tensor.pin_memory().to(device, non_blocking=True)


def amp_dtype(precision: str, device: torch.device):
    """bf16 where the GPU has it, else fp16 on CUDA; fp32 on CPU (CPU autocast is slower for training)."""
    if precision == "fp32" or device.type != "cuda":
        return None
    return resolve_dtype(precision, "cuda")


@torch.no_grad()
def predict_proba(model, ids: list[list[int]], pad_id: int, device, precision: str = "auto",
                  batch_tokens: int = 16384) -> np.ndarray:
    """Softmax probabilities in input order (a sigmoid per label for a multi-label model); batches by token
    budget over length-sorted texts."""
    model.eval()
    squash = head_of(model).squash
    dtype = amp_dtype(precision, device)
    order = np.argsort([len(x) for x in ids], kind="stable")
    out = np.zeros((len(ids), model.config.num_labels), dtype=np.float32)
    start = 0
    while start < len(order):
        longest = len(ids[order[start]])
        end = start + 1
        while end < len(order) and (end - start + 1) * max(longest, len(ids[order[end]])) <= batch_tokens:
            longest = max(longest, len(ids[order[end]]))
            end += 1
        rows = order[start:end]
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = model(**collate(ids, rows, pad_id, device)).logits
        out[rows] = squash(logits.float()).cpu().numpy()
        start = end
    return out


@dataclass
class _Step:
    """What one optimisation step needs besides its rows: built once per fit."""

    model: object
    wrapped: object  # the model as called: compiled or wrapped by accelerate, or the model itself
    optimizer: object
    scaler: object
    accelerator: object
    device: object
    dtype: object
    weight: object  # class weights of the loss (multi-label: BCE's pos_weight), or None
    widths: list | None  # padded widths of fixed-shape batches, or None
    pad_id: int
    head: object  # finetune/heads.py: the loss, the targets and their padding of the model's kind


def _prepare_step(model, train_ids, y_train, cfg: TrainConfig, accelerator, device, pad_id: int) -> _Step:
    dtype = amp_dtype(cfg.precision, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    groups = layer_lr_groups(model, cfg.layer_decay, cfg.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, fused=device.type == "cuda")
    wrapped = accelerator.prepare(model) if accelerator and accelerator.num_processes > 1 else model
    n_classes = model.config.num_labels
    head = head_of(model)
    weight = None
    if cfg.class_weights:
        weight = torch.tensor(head.class_weight(y_train, n_classes), dtype=torch.float32, device=device)
    graphs = cfg.compile == "graphs"
    if graphs and device.type != "cuda":
        raise ValueError(f"compile 'graphs' replays CUDA graphs and needs a CUDA device, not {device.type}; "
                         "use compile 'on' or 'off'")
    # A graph has fixed shapes: graphs pad to the width buckets whatever static_shapes says.
    longest = int(max(len(x) for x in train_ids))
    widths = bucket_widths(longest) if graphs or switch_on(cfg.static_shapes, device) else None
    if graphs:
        wrapped = torch.compile(wrapped, **COMPILE_OPTIONS, mode="reduce-overhead")
    elif switch_on(cfg.compile, device):
        wrapped = torch.compile(wrapped, **COMPILE_OPTIONS)
    return _Step(model, wrapped, optimizer, scaler, accelerator, device, dtype, weight, widths, pad_id, head)


def _train_step(run: _Step, train_ids, rows, labels, lengths, batch_size: int, max_grad_norm: float):
    """One optimisation step on `rows`; returns the loss, left on the device."""
    device = run.device
    if run.widths:
        longest = max(lengths[rows])
        batch = collate(train_ids, rows, run.pad_id, device, next(w for w in run.widths if w >= longest), batch_size)
        # padding rows are ignored by the loss: -100 for cross-entropy, -1 (masked) for BCE
        pad = batch_size - len(rows)
        labels = run.head.pad(labels, pad)
    else:
        batch = collate(train_ids, rows, run.pad_id, device)
    with torch.autocast(device.type, dtype=run.dtype or torch.float32, enabled=run.dtype is not None):
        logits = run.wrapped(**batch).logits
    loss = run.head.loss(logits.float(), to_device(labels.numpy(), device), run.weight)
    run.optimizer.zero_grad(set_to_none=True)
    scaled = run.scaler.scale(loss)
    run.accelerator.backward(scaled) if run.accelerator else scaled.backward()
    run.scaler.unscale_(run.optimizer)
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), max_grad_norm)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    return loss.detach()


def _inner_score(model, val_ids, y_val, pad_id: int, device, cfg: TrainConfig, hist: History, epoch: int) -> float:
    """The inner split's score that picks the epoch (higher is better; never the fold being scored), with its
    macro-F1 and loss recorded in `hist`: the head's (finetune/heads.py: macro-F1, or minus the mean BCE)."""
    proba = predict_proba(model, val_ids, pad_id, device, cfg.precision)
    f1, loss, score = head_of(model).inner_score(proba, y_val, model.config.num_labels)
    hist.epochs.append(epoch + 1)
    hist.val_macro_f1.append(float(f1))
    hist.val_loss.append(float(loss))
    return float(score)


def fit(model, tokenizer, train_ids, y_train, val_ids, y_val, cfg: TrainConfig, seed: int,
        accelerator=None, desc: str = "train", on_step=None) -> History:
    """Train `model` (with a fresh head: multi-label heads start at the label priors) in place; returns with the
    weights of its best inner-validation epoch loaded.
    `on_step(step, steps, epoch)`, when given, is called after every step (epoch counts from 1)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = accelerator.device if accelerator else torch.device("cpu")
    head_of(model).start(model, y_train, cfg.class_weights)
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    run = _prepare_step(model, train_ids, y_train, cfg, accelerator, device, pad_id)
    n_proc, rank = (accelerator.num_processes, accelerator.process_index) if accelerator else (1, 0)
    lengths = np.array([len(x) for x in train_ids])
    steps_per_epoch = math.ceil(len(train_ids) / cfg.batch_size) // n_proc
    total = steps_per_epoch * cfg.epochs
    warmup = max(1, int(cfg.warmup * total))
    y_t = torch.tensor(np.asarray(y_train), dtype=run.head.target_dtype)

    hist, best, best_state, stale, step = History(), -math.inf, None, 0, 0
    t0, seen = time.perf_counter(), 0
    bar = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, leave=False, disable=rank != 0)
    for epoch in range(cfg.epochs):
        model.train()
        batches = length_grouped_batches(lengths, cfg.batch_size, rng)[rank::n_proc][:steps_per_epoch]
        epoch_losses = []
        for rows in batches:
            for g in run.optimizer.param_groups:
                g["lr"] = lr_at(step, total, cfg.lr, warmup) * g["lr_scale"]
            epoch_losses.append(_train_step(run, train_ids, rows, y_t[rows], lengths, cfg.batch_size,
                                            cfg.max_grad_norm))
            step += 1
            seen += len(rows) * n_proc
            hist.steps.append(step)
            if step % 50 == 0:  # reading a loss waits for the GPU: only now and then
                bar.set_postfix(epoch=epoch + 1, loss=f"{epoch_losses[-1].item():.3f}")
            bar.update()
            if on_step is not None:
                on_step(step, total, epoch + 1)
        hist.train_loss += torch.stack(epoch_losses).float().cpu().tolist() if epoch_losses else []

        if len(val_ids):  # early stopping looks only at the inner split, never at the fold being scored
            score = _inner_score(model, val_ids, y_val, pad_id, device, cfg, hist, epoch)
            if score > best:
                best, stale, hist.best_epoch = score, 0, epoch + 1
                best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
            else:
                stale += 1
                if cfg.patience and stale >= cfg.patience:
                    break
        else:
            hist.best_epoch = epoch + 1
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    hist.seconds = time.perf_counter() - t0
    hist.samples_per_second = seen / hist.seconds if hist.seconds else 0.0
    return hist
