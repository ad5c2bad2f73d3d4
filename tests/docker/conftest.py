"""A tiny exported (ONNX) model for the image tests: what the slim image serves."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_onnx_dir(tiny_classifier_dir, tmp_path_factory) -> Path:
    from serving.export import ExportConfig, run

    out = tmp_path_factory.mktemp("tiny-onnx")
    run(ExportConfig(model=tiny_classifier_dir, output=out))
    return out
