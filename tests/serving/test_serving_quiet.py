"""Export drops the two library messages it understands, and nothing else those loggers say."""

from __future__ import annotations

import logging

from serving.quiet import understood_messages_dropped


def test_only_the_understood_messages_are_dropped(caplog):
    hf = logging.getLogger("transformers.modeling_utils")
    root = logging.getLogger()  # where ONNX Runtime's quantizer logs (logging.warning)
    with caplog.at_level(logging.WARNING), understood_messages_dropped():
        hf.warning("`torch_dtype` is deprecated! Use `dtype` instead!")
        root.warning("Please consider to run pre-processing before quantization. Refer to example: ...")
        hf.warning("Some weights were not initialized")
        root.warning("calibration failed")
    assert [r.getMessage() for r in caplog.records] == ["Some weights were not initialized", "calibration failed"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        hf.warning("`torch_dtype` is deprecated! Use `dtype` instead!")  # outside the block it shows again
    assert len(caplog.records) == 1
