"""Print pyproject's dependencies for one image variant, one requirement per line (for `pip install -r`).

    python docker/deps.py serve   # the slim image: serving an exported ONNX folder (no torch)
    python docker/deps.py rest    # what `serve` leaves out except torch (the full and GPU images add it)

pyproject.toml stays the one list of versions; this file only names what serving never imports.
tests/docker/test_serving_without_torch.py serves an ONNX folder with these modules made unimportable.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# distribution -> the module it provides. Training, export and quantization import these; serving does not.
TRAIN_ONLY = {
    "torch": "torch",
    "accelerate": "accelerate",
    "optimum": "optimum",
    "optimum-onnx": "optimum",
    "onnx": "onnx",  # read only to export, and by the TensorRT provider (which needs the GPU image)
    "matplotlib": "matplotlib",
    # fits the TF-IDF baseline; a served blend applies the saved one with numpy (baseline/tfidf.py), which
    # also keeps scipy (sklearn's dependency) out of the slim image
    "scikit-learn": "sklearn",
    "iterative-stratification": "iterstrat",  # k-fold's multi-label folds
    # finetune/label_issues.py alone; it requires scikit-learn, so in the slim image it brought scipy and
    # sklearn back (about 200 MB: the image grew past tests/docker's 1 GB)
    "cleanlab": "cleanlab",
}
# installed on its own, before the rest, from a source chosen at build time (CPU index, GPU PyPI, a wheel)
SEPARATE = {"torch"}
# extras every image serves with: the cascade's client (`--fallback-url`), small and imported only when asked
SERVE_EXTRAS = ("llm",)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def dependencies(pyproject: Path) -> list[str]:
    """The base dependencies and those of SERVE_EXTRAS."""
    import tomllib  # Python 3.11+, as in every image

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    return project["dependencies"] + [r for extra in SERVE_EXTRAS for r in extras[extra]]


def select(requirements: list[str], variant: str) -> list[str]:
    if variant == "serve":
        return [r for r in requirements if _name(r) not in TRAIN_ONLY]
    if variant == "rest":
        return [r for r in requirements if _name(r) in TRAIN_ONLY and _name(r) not in SEPARATE]
    raise ValueError(f"variant {variant!r}: use serve or rest")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("serve", "rest"):
        print("usage: python docker/deps.py serve|rest", file=sys.stderr)
        return 2
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    print("\n".join(select(dependencies(pyproject), argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
