"""The tiny model docker/fleet_smoke.sh serves: the tests' random ELECTRA classifier, exported to ONNX, and a
toy labeled table for the trainer. Nothing here is a real model; it only has to load and answer.

    PYTHONPATH=. python docker/fleet_model.py OUT    # OUT/onnx (MODEL), OUT/encoder (ENCODER), OUT/train.csv
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(out: Path) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]
    from conftest import make_toy_rows
    from hostile_bodies import tiny_model

    from serving.export import ExportConfig, run

    encoder = tiny_model(out)  # a transformers folder with a head: what a retrain fine-tunes
    if not (out / "onnx" / "config.json").exists():
        shutil.rmtree(out / "onnx", ignore_errors=True)
        run(ExportConfig(model=encoder, output=out / "onnx"))
    make_toy_rows().to_csv(out / "train.csv", index=False)
    # the containers' user (uid 10001) reads these through bind mounts
    for p in [out, *out.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python docker/fleet_model.py OUT")
    build(Path(sys.argv[1]).resolve())
