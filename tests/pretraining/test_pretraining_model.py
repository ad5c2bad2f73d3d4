"""The ELECTRA objective: masking, labels, gradient flow, gather-first logits, export parity."""

from __future__ import annotations

import pytest
import torch

from pretraining import model as electra
from pretraining.model import (
    OBJECTIVES,
    mask_tokens,
    masked_cross_entropy,
    mlm_logits_at,
    replace_tokens,
    slots_for,
)


def batch_of(tokenizer, n_rows=4, length=32, seed=0, pad_tail=True):
    """Random ordinary tokens framed as [CLS] ... [SEP], some rows padded at the end."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, len(tokenizer), (n_rows, length), generator=g)
    ids[:, 0] = tokenizer.cls_token_id
    lengths = torch.full((n_rows,), length)
    if pad_tail:
        lengths = torch.randint(length // 2, length + 1, (n_rows,), generator=g)
    for row, n in enumerate(lengths.tolist()):
        ids[row, n - 1] = tokenizer.sep_token_id
        ids[row, n:] = tokenizer.pad_token_id
    return ids, (ids != tokenizer.pad_token_id).long()


@pytest.mark.parametrize("mask_share, random_share", [(0.85, 0.0), (0.8, 0.1)])
def test_masking_rate_and_mask_share(mask_share, random_share):
    torch.manual_seed(0)
    vocab, mask_id = 1000, 4
    ids = torch.randint(5, vocab, (256, 128))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, 0] = maskable[:, -1] = False  # [CLS], [SEP]
    maskable[::2, 100:] = False  # padding in half the rows
    masked = mask_tokens(ids, maskable, 0.15, mask_id, vocab, mask_share, random_share)
    corrupted, chosen = masked.ids, masked.chosen

    expected_per_row = (maskable.sum(1).float() * 0.15).round()
    assert torch.equal(chosen.sum(1).float(), expected_per_row)
    # The slots name the same positions as the mask, fixed in number whatever the row's length.
    assert masked.positions.shape == masked.valid.shape == (256, slots_for(128, 0.15))
    assert torch.equal(masked.valid.sum(1).float(), expected_per_row)
    rows = torch.arange(256)[:, None].expand_as(masked.positions)
    assert chosen[rows[masked.valid], masked.positions[masked.valid]].all()
    assert not (chosen & ~maskable).any()
    assert torch.equal(corrupted[~chosen], ids[~chosen])
    n = chosen.sum().item()
    mask_rate = (corrupted[chosen] == mask_id).sum().item() / n
    kept_rate = (corrupted[chosen] == ids[chosen]).sum().item() / n
    assert abs(mask_rate - mask_share) < 0.02
    # A random replacement may hit the original id (1 in 1000), so "kept" includes a sliver of those.
    assert abs(kept_rate - (1 - mask_share - random_share)) < 0.02


def test_masking_is_uniform_over_positions():
    torch.manual_seed(1)
    ids = torch.randint(5, 100, (4000, 20))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    chosen = mask_tokens(ids, maskable, 0.15, 4, 100, 0.85, 0.0).chosen
    per_position = chosen.float().mean(0)
    assert (per_position - 0.15).abs().max() < 0.03


def test_objectives_use_the_documented_recipe(make_model):
    assert (make_model(objective="electra")[0].mask_share, make_model(objective="electra")[0].random_share) == (0.85, 0.0)
    assert (make_model(objective="mlm")[0].mask_share, make_model(objective="mlm")[0].random_share) == (0.8, 0.1)


def test_labels_are_one_exactly_where_the_sample_differs(make_model, monkeypatch):
    model, tok = make_model()
    ids, attention = batch_of(tok, n_rows=8)
    maskable = attention.bool() & ~model.special[ids]
    masked = mask_tokens(ids, maskable, 0.3, tok.mask_token_id, len(tok), 0.85, 0.0)
    positions, valid, chosen = masked.positions, masked.valid, masked.chosen
    assert not valid.all()  # rows of different lengths: some slots are spare
    targets = ids.gather(1, positions)
    # A generator whose samples equal the original at even-numbered slots and differ at odd ones; spare
    # slots get a differing sample too, which must not reach the input.
    differ = torch.arange(positions.shape[1]).expand_as(positions) % 2 == 1
    rigged = torch.where(differ | ~valid, (targets + 1) % len(tok), targets)
    monkeypatch.setattr(electra, "gumbel_sample", lambda logits: rigged)
    fake, labels = replace_tokens(ids, positions, valid, torch.zeros(*positions.shape, len(tok)))

    expected = torch.zeros_like(ids, dtype=torch.bool)
    rows = torch.arange(len(ids))[:, None].expand_as(positions)
    expected[rows[valid], positions[valid]] = differ[valid]
    assert torch.equal(labels, expected)
    assert torch.equal(fake[rows[valid], positions[valid]], rigged[valid])
    assert torch.equal(fake[~chosen], ids[~chosen])


def test_forward_labels_match_its_own_samples(make_model):
    """Through the full forward pass: the replaced count the discriminator is trained on equals the number
    of positions where the Gumbel sample differs from the original, never the number of masked positions."""
    model, tok = make_model()
    seen = {}
    original = electra.replace_tokens

    def spy(input_ids, positions, valid, gen_logits):
        fake, labels = original(input_ids, positions, valid, gen_logits)
        seen.update(input_ids=input_ids, valid=valid, fake=fake, labels=labels)
        return fake, labels

    electra.replace_tokens = spy
    try:
        out = model(*batch_of(tok))
    finally:
        electra.replace_tokens = original
    differs = (seen["fake"] != seen["input_ids"]).sum()
    assert out.stats["actual_replaced"] == differs == seen["labels"].sum()
    assert out.stats["n_masked"] == seen["valid"].sum()


def test_gumbel_sample_follows_the_softmax():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).repeat(20000, 1).to(torch.bfloat16)
    freq = torch.bincount(electra.gumbel_sample(logits), minlength=3).float() / 20000
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)
    assert not electra.gumbel_sample(logits.float().requires_grad_()).requires_grad


def _grads(params):
    return {name: (None if p.grad is None else p.grad.detach().clone()) for name, p in params}


def test_no_discriminator_gradient_reaches_the_generator(make_model):
    model, tok = make_model()
    model.train()
    out = model(*batch_of(tok))
    shared = model.discriminator.electra.embeddings.word_embeddings.weight
    gen_only = [(n, p) for n, p in model.generator.named_parameters()
                if all(p is not q for q in model.discriminator.parameters())]
    disc_only = [(n, p) for n, p in model.discriminator.named_parameters()
                 if all(p is not q for q in model.generator.parameters())]
    assert gen_only and disc_only

    out.disc_loss.backward(retain_graph=True)
    assert all(p.grad is None or not p.grad.any() for _, p in gen_only)
    assert any(p.grad is not None and p.grad.any() for _, p in disc_only)
    from_disc = shared.grad.clone()
    assert from_disc.any()

    model.zero_grad(set_to_none=True)
    out.mlm_loss.backward(retain_graph=True)
    assert all(p.grad is None or not p.grad.any() for _, p in disc_only)
    from_gen = shared.grad.clone()
    assert from_gen.any()

    # The embeddings' gradient under the full loss is both contributions, weighted as the loss says.
    model.zero_grad(set_to_none=True)
    out.loss.backward()
    assert torch.allclose(shared.grad, from_gen + model.disc_weight * from_disc, atol=1e-5, rtol=1e-4)


def test_gather_first_loss_equals_the_all_logits_loss(make_model):
    model, tok = make_model()
    model.eval()
    ids, attention = batch_of(tok, n_rows=6)
    maskable = attention.bool() & ~model.special[ids]
    masked = mask_tokens(ids, maskable, 0.15, tok.mask_token_id, len(tok), 0.85, 0.0)
    assert not masked.valid.all()  # spare slots are in play and must not count
    with torch.no_grad():
        logits = mlm_logits_at(model.generator, masked.ids, attention, masked.positions)
        gathered = masked_cross_entropy(logits, ids.gather(1, masked.positions), masked.valid)
        labels = ids.masked_fill(~masked.chosen, -100)
        # transformers' own path: all (batch, length, vocab) logits, CE with -100 elsewhere
        full = model.generator(masked.ids, attention_mask=attention, labels=labels).loss
    assert torch.allclose(gathered, full, atol=1e-6)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_is_one_graph_without_host_syncs(make_model, objective):
    """Every shape in the step is fixed by (batch, length): no boolean-mask gather, no count read back. On a
    GPU that means no stall per step and a step torch.compile takes whole (--compile)."""
    model, tok = make_model(objective=objective)
    model.train()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(*batch_of(tok))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_trains(make_model, objective):
    model, tok = make_model(objective=objective)
    model.train()
    out = model(*batch_of(tok))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    encoder = model.discriminator.electra.encoder.layer[0].attention.self.query.weight
    assert encoder.grad is not None and encoder.grad.any()


def test_two_stage_freezes_the_generator(make_model):
    model, tok = make_model(objective="electra", two_stage=True, generator_ratio=1.0, intermediate_size=128)
    model.stage = "generator"
    out = model(*batch_of(tok))
    assert out.disc_loss is None
    model.start_discriminator_stage()
    # Same size: the discriminator starts from the generator's encoder.
    for a, b in zip(model.generator.electra.encoder.parameters(), model.discriminator.electra.encoder.parameters()):
        assert torch.equal(a, b) and a is not b
    assert not any(p.requires_grad for p in model.generator.parameters())
    gen_emb = model.generator.electra.embeddings.word_embeddings.weight
    assert gen_emb is not model.discriminator.electra.embeddings.word_embeddings.weight
    assert model.generator.generator_lm_head.weight is gen_emb
    out = model(*batch_of(tok))
    assert torch.allclose(out.loss, model.disc_weight * out.disc_loss)
    out.loss.backward()
    assert gen_emb.grad is None


def test_sdpa_attention_matches_transformers_eager(make_model):
    model, tok = make_model()
    model.eval()
    ids, attention = batch_of(tok)
    with torch.no_grad():
        ours = model.discriminator(ids, attention_mask=attention).logits
        for module in model.modules():
            if type(module) is electra.SdpaSelfAttention:
                module.__class__ = electra.ElectraSelfAttention
        eager = model.discriminator(ids, attention_mask=attention).logits
    assert torch.allclose(ours, eager, atol=1e-5)


def test_exported_models_give_the_training_logits(make_model, tmp_path):
    from transformers import AutoModelForSequenceClassification, ElectraForMaskedLM, ElectraForPreTraining

    from pretraining.train import export

    model, tok = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):  # move away from the initialisation, so equal numbers are not equal by construction
        model(*batch_of(tok, seed=_)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    export(model, tok, tmp_path)
    model.eval()
    ids, attention = batch_of(tok, seed=9)

    disc = ElectraForPreTraining.from_pretrained(tmp_path / "discriminator").eval()
    gen = ElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    with torch.no_grad():
        assert torch.allclose(model.discriminator(ids, attention_mask=attention).logits,
                              disc(ids, attention_mask=attention).logits, atol=1e-5)
        assert torch.allclose(model.generator(ids, attention_mask=attention).logits,
                              gen(ids, attention_mask=attention).logits, atol=1e-5)
    # Shared embeddings are saved into both folders.
    assert torch.equal(disc.electra.embeddings.word_embeddings.weight, gen.electra.embeddings.word_embeddings.weight)

    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "discriminator", num_labels=3)
    assert torch.equal(classifier.electra.encoder.layer[1].output.dense.weight,
                       disc.electra.encoder.layer[1].output.dense.weight)
    assert (tmp_path / "discriminator" / "model.safetensors").exists()
    assert (tmp_path / "discriminator" / "tokenizer.json").exists()
