"""The whole ELECTRA pretraining model in one file: generator, discriminator, masking, sampling, losses.

Built from transformers' own Electra modules, so `discriminator` *is* an `ElectraForPreTraining` and
`generator` *is* an `ElectraForMaskedLM`: `save_pretrained` writes exactly what fine-tuning and the hub
expect, with no weight renaming. What transformers does not have, and this file adds:

- the generator and discriminator share the embedding block (token, position and type embeddings and
  their LayerNorm); each keeps its own `embeddings_project` since their hidden sizes differ;
- masking by the official ELECTRA recipe (see `mask_tokens`);
- the generator's vocabulary projection only at masked positions (gather first), with a fixed number of
  slots per row so every step has the same shapes: no host sync, and the whole step compiles as one graph;
- Gumbel-max sampling of replacements in fp32 without gradient, and `L_MLM + lambda * L_Disc`;
- scaled-dot-product attention in place of transformers' eager attention (same parameters).

Reference: Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
Generators", and google-research/electra (pretrain_helpers.py, run_pretraining.py).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining
from transformers.models.electra.modeling_electra import ElectraSelfAttention

from pretraining.config import OBJECTIVES  # defined torch-free there, for the flags


class SdpaSelfAttention(ElectraSelfAttention):
    """transformers 4.57 has only eager attention for ELECTRA, which materialises the (batch, heads, L, L)
    scores and their softmax. Same parameters, fused kernel: checkpoints stay interchangeable."""

    def forward(self, hidden_states, attention_mask=None, head_mask=None, encoder_hidden_states=None,
                past_key_values=None, output_attentions=False, cache_position=None, **kwargs):
        b, n, _ = hidden_states.shape

        def heads(x):
            return x.view(b, n, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

        q, k, v = heads(self.query(hidden_states)), heads(self.key(hidden_states)), heads(self.value(hidden_states))
        mask = None if attention_mask is None else attention_mask.to(q.dtype)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 dropout_p=self.dropout.p if self.training else 0.0)
        return context.transpose(1, 2).reshape(b, n, self.all_head_size), None


def use_sdpa(model: nn.Module) -> None:
    for module in model.modules():
        if type(module) is ElectraSelfAttention and module.position_embedding_type == "absolute":
            module.__class__ = SdpaSelfAttention


def generator_config(disc: ElectraConfig, ratio: float) -> ElectraConfig:
    """As google-research/electra's get_generator_config: same depth, hidden scaled by `ratio`, FFN 4x hidden,
    one head per 64 dimensions. The embedding size stays the discriminator's because embeddings are shared."""
    hidden = max(1, round(disc.hidden_size * ratio))
    heads = max(1, hidden // 64)
    return ElectraConfig(**{**disc.to_dict(), "hidden_size": hidden, "intermediate_size": 4 * hidden,
                            "num_attention_heads": heads})


class Masked(NamedTuple):
    ids: torch.Tensor  # (batch, length) the corrupted input
    positions: torch.Tensor  # (batch, k) chosen positions, k fixed by the length (see `slots_for`)
    valid: torch.Tensor  # (batch, k) False on the spare slots of rows with fewer chosen positions
    chosen: torch.Tensor  # (batch, length) the same choice as a mask


def slots_for(length: int, mask_prob: float) -> int:
    """Gather slots per row: at least the most positions any row of this length can have chosen. Fixed by the
    length, never by the data, so shapes never depend on a count the host would have to read (a GPU sync)."""
    return min(length, max(1, math.ceil(length * mask_prob)))


def mask_tokens(input_ids: torch.Tensor, maskable: torch.Tensor, mask_prob: float, mask_token_id: int,
                vocab_size: int, mask_share: float, random_share: float) -> Masked:
    """Choose round(mask_prob * tokens) positions per sequence (at least one) among `maskable`, uniformly
    without replacement, as the official ELECTRA `mask()` does. Of the chosen: `mask_share` become [MASK],
    `random_share` a random token, the rest keep the original. ELECTRA's recipe is 85% [MASK] / 15% kept /
    0% random (pretrain_helpers.py); BERT's is 80/10/10. The chosen positions come as `slots_for` slots per
    row, like the official `masked_lm_positions` / `masked_lm_weights`."""
    n_tokens = maskable.sum(1)
    n_chosen = (n_tokens.float() * mask_prob).round().long().clamp(min=1).minimum(n_tokens)
    # A random score per position, non-maskable ones pushed last: the n lowest are a uniform sample.
    score = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~maskable, 2.0)
    k = slots_for(input_ids.shape[1], mask_prob)
    positions = score.topk(k, dim=1, largest=False).indices  # ascending score: the first n_chosen are the pick
    valid = torch.arange(k, device=input_ids.device) < n_chosen[:, None]
    chosen = torch.zeros_like(maskable).scatter(1, positions, valid)
    u = torch.rand(input_ids.shape, device=input_ids.device)
    to_mask = chosen & (u < mask_share)
    to_random = chosen & (u >= mask_share) & (u < mask_share + random_share)
    corrupted = input_ids.masked_fill(to_mask, mask_token_id)
    random_ids = torch.randint(vocab_size, input_ids.shape, device=input_ids.device)
    corrupted = torch.where(to_random, random_ids, corrupted)
    return Masked(corrupted, positions, valid, chosen)


@torch.no_grad()
def gumbel_sample(logits: torch.Tensor) -> torch.Tensor:
    """One draw from softmax(logits) per row (Gumbel-max). fp32 because in bf16 the noise and logits round
    to ties and argmax favours low ids; no gradient because the discriminator must not train the generator."""
    u = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    return (logits.float() - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)


def replace_tokens(input_ids, positions, valid, gen_logits) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels: generator samples at the chosen positions (spare slots write the
    original back). Integer ids carry no gradient, so nothing from the discriminator's loss reaches the
    generator. A sample equal to the original is labelled original (paper, section 2), hence labels from
    comparing ids, not from the choice."""
    original = input_ids.gather(1, positions)
    fake_ids = input_ids.scatter(1, positions, torch.where(valid, gumbel_sample(gen_logits.detach()), original))
    return fake_ids, fake_ids != input_ids


def mlm_logits_at(mlm: ElectraForMaskedLM, input_ids, attention_mask, positions) -> torch.Tensor:
    """Vocabulary logits at `positions` (batch, k) only, (batch, k, vocab): gather the hidden states first so
    the (batch, length, vocab) tensor is never built."""
    hidden = mlm.electra(input_ids, attention_mask=attention_mask).last_hidden_state
    picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    return mlm.generator_lm_head(mlm.generator_predictions(picked))


def masked_cross_entropy(logits, targets, valid) -> torch.Tensor:
    """Mean cross-entropy over the valid slots; fp32 because bf16 log-softmax over a large vocabulary is coarse."""
    per_slot = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return (per_slot * valid.flatten()).sum() / valid.sum().clamp(min=1)


@dataclass
class StepOutput:
    loss: torch.Tensor
    mlm_loss: torch.Tensor | None
    disc_loss: torch.Tensor | None
    stats: dict[str, torch.Tensor]  # sums over the batch (counts) so several steps add up exactly


class ElectraPretrainer(nn.Module):
    """`stage` is "joint" (normal ELECTRA), or "generator" then "discriminator" for --two-stage."""

    def __init__(self, disc_config: ElectraConfig, *, generator_ratio: float = 0.25, objective: str = "electra",
                 mask_prob: float = 0.15, disc_weight: float = 50.0, mask_token_id: int,
                 special_token_ids: list[int], sdpa: bool = True):
        super().__init__()
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
        self.objective, self.mask_prob, self.disc_weight = objective, mask_prob, disc_weight
        self.mask_token_id, self.vocab_size = mask_token_id, disc_config.vocab_size
        self.mask_share, self.random_share = (0.8, 0.1) if objective == "mlm" else (0.85, 0.0)
        self.stage = "joint"
        special = torch.zeros(disc_config.vocab_size, dtype=torch.bool)
        special[special_token_ids] = True
        self.register_buffer("special", special, persistent=False)

        self.discriminator = ElectraForPreTraining(disc_config)
        embeddings = self.discriminator.electra.embeddings
        self.generator = None
        if objective != "mlm":
            self.generator = ElectraForMaskedLM(generator_config(disc_config, generator_ratio))
            self._share_embeddings(self.generator, embeddings)
        # The MLM-family objectives put an MLM head on the discriminator's own encoder.
        self.mlm = None
        if objective in ("mlm", "replace-mlm", "all-tokens-mlm"):
            self.mlm = ElectraForMaskedLM(disc_config)
            self.mlm.electra = self.discriminator.electra
            self.mlm.generator_lm_head.weight = embeddings.word_embeddings.weight
        if sdpa:
            use_sdpa(self)

    @staticmethod
    def _share_embeddings(mlm: ElectraForMaskedLM, embeddings: nn.Module) -> None:
        mlm.electra.embeddings = embeddings
        # The generator's output layer is tied to the input embeddings, as in ELECTRA and BERT.
        mlm.generator_lm_head.weight = embeddings.word_embeddings.weight

    def start_discriminator_stage(self) -> None:
        """--two-stage, second half (paper, section 3.2): freeze the generator, with a private copy of the
        embeddings as they are now so the discriminator's updates do not move it; when both have the same
        architecture (--generator-ratio 1), start the discriminator from the generator's weights, as the paper
        does."""
        gen, disc = self.generator, self.discriminator
        gen_state, disc_state = gen.electra.state_dict(), disc.electra.state_dict()
        if gen_state.keys() == disc_state.keys() and all(gen_state[k].shape == v.shape for k, v in disc_state.items()):
            disc.electra.load_state_dict(gen_state)
        self._share_embeddings(gen, copy.deepcopy(gen.electra.embeddings))
        gen.requires_grad_(False)
        self.stage = "discriminator"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> StepOutput:
        maskable = attention_mask.bool() & ~self.special[input_ids]
        masked = mask_tokens(input_ids, maskable, self.mask_prob, self.mask_token_id,
                             self.vocab_size, self.mask_share, self.random_share)
        positions, valid = masked.positions, masked.valid
        targets = input_ids.gather(1, positions)
        if self.objective == "mlm":
            logits = mlm_logits_at(self.mlm, masked.ids, attention_mask, positions)
            loss = masked_cross_entropy(logits, targets, valid)
            return StepOutput(loss, loss, None, {**_mlm_stats(logits, targets, valid), "loss": loss.detach(),
                                                 "mlm_loss": loss.detach()})

        train_generator = self.stage != "discriminator"
        with torch.set_grad_enabled(train_generator and torch.is_grad_enabled()):
            gen_logits = mlm_logits_at(self.generator, masked.ids, attention_mask, positions)
            mlm_loss = masked_cross_entropy(gen_logits, targets, valid)
        stats = _mlm_stats(gen_logits, targets, valid)
        if self.stage == "generator":
            return StepOutput(mlm_loss, mlm_loss, None, {**stats, "loss": mlm_loss.detach(),
                                                          "mlm_loss": mlm_loss.detach()})

        fake_ids, replaced = replace_tokens(input_ids, positions, valid, gen_logits)

        if self.objective in ("electra", "electra-15"):
            disc_logits = self.discriminator(fake_ids, attention_mask=attention_mask).logits
            weight = (attention_mask if self.objective == "electra" else masked.chosen).float()
            per_token = F.binary_cross_entropy_with_logits(disc_logits.float(), replaced.float(), reduction="none")
            disc_loss = (per_token * weight).sum() / weight.sum().clamp(min=1)
            stats.update(_disc_stats(disc_logits, replaced, weight.bool()))
            loss = self.disc_weight * disc_loss if self.stage == "discriminator" else mlm_loss + self.disc_weight * disc_loss
        elif self.objective == "replace-mlm":
            main_logits = mlm_logits_at(self.mlm, fake_ids, attention_mask, positions)
            disc_loss = masked_cross_entropy(main_logits, targets, valid)
            stats.update({"main_correct": ((main_logits.argmax(-1) == targets) & valid).sum()})
            loss = mlm_loss + disc_loss
        else:  # all-tokens-mlm
            disc_loss = self._all_tokens_loss(fake_ids, input_ids, attention_mask.bool())
            loss = mlm_loss + disc_loss
        stats.update({"loss": loss.detach(), "mlm_loss": mlm_loss.detach(), "disc_loss": disc_loss.detach(),
                      "n_replaced": replaced.sum(), "n_tokens": attention_mask.sum()})
        return StepOutput(loss, mlm_loss, disc_loss, stats)

    def _all_tokens_loss(self, fake_ids, input_ids, real):
        """p(x_t) = D_t * [x_t == input_t] + (1 - D_t) * softmax_t(x_t), with the copy probability
        D_t = sigmoid(-z_t) from the discriminator head (z > 0 still means "replaced"). Every position is
        computed and padding weighted out: blocks are nearly all real tokens, and shapes stay fixed."""
        hidden = self.discriminator.electra(fake_ids, attention_mask=real.long()).last_hidden_state
        log_softmax = F.log_softmax(self.mlm.generator_lm_head(self.mlm.generator_predictions(hidden)).float(), -1)
        log_p_vocab = log_softmax.gather(2, input_ids[..., None]).squeeze(2)
        z = self.discriminator.discriminator_predictions(hidden).float()
        copy_ok = fake_ids == input_ids
        log_p = torch.where(copy_ok, torch.logaddexp(F.logsigmoid(-z), F.logsigmoid(z) + log_p_vocab),
                            F.logsigmoid(z) + log_p_vocab)
        return -(log_p * real).sum() / real.sum().clamp(min=1)


def _mlm_stats(logits, targets, valid):
    return {"gen_correct": ((logits.detach().argmax(-1) == targets) & valid).sum(), "n_masked": valid.sum()}


def _disc_stats(disc_logits, replaced, counted):
    predicted = (disc_logits.detach() > 0) & counted
    actual = replaced & counted
    return {"disc_correct": ((predicted == actual) & counted).sum(), "n_disc": counted.sum(),
            "true_positive": (predicted & actual).sum(), "predicted_replaced": predicted.sum(),
            "actual_replaced": actual.sum()}
