"""Export drops the two library messages it understands, and nothing else those loggers say."""

from __future__ import annotations

import logging

from serving.quiet import understood_messages_dropped


def test_only_the_understood_messages_are_dropped(caplog, monkeypatch):
    hf = logging.getLogger("transformers.modeling_utils")
    root = logging.getLogger()  # where ONNX Runtime's quantizer logs (logging.warning)
    # Earlier tests may have run kfold in-process (transformers verbosity ERROR, loggers not propagating
    # to the root where caplog listens): listen on this logger directly, at WARNING, whatever ran before.
    monkeypatch.setattr(hf, "propagate", False)
    monkeypatch.setattr(hf, "handlers", [caplog.handler])
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger=hf.name), \
            understood_messages_dropped():
        hf.warning("`torch_dtype` is deprecated! Use `dtype` instead!")
        root.warning("Please consider to run pre-processing before quantization. Refer to example: ...")
        hf.warning("Some weights were not initialized")
        root.warning("calibration failed")
    assert [r.getMessage() for r in caplog.records] == ["Some weights were not initialized", "calibration failed"]
    caplog.clear()
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger=hf.name):
        hf.warning("`torch_dtype` is deprecated! Use `dtype` instead!")  # outside the block it shows again
    assert len(caplog.records) == 1


def test_transformers_tracer_warnings_are_dropped_and_no_others():
    """Issue 45: every export printed a TracerWarning from transformers' modeling code."""
    import warnings

    import torch

    def warn(category, module, text="Converting a tensor to a Python boolean might cause the trace to be incorrect"):
        warnings.warn_explicit(text, category, "modeling_electra.py", 1, module=module)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with understood_messages_dropped():
            warn(torch.jit.TracerWarning, "transformers.models.electra.modeling_electra")
            warn(torch.jit.TracerWarning, "serving.export")  # ours: still shown
            warn(UserWarning, "transformers.models.electra.modeling_electra", "a deprecated argument")  # shown
        warn(torch.jit.TracerWarning, "transformers.models.electra.modeling_electra")  # outside: shown
    assert [(w.category.__name__, w.filename) for w in seen] == [("TracerWarning", "modeling_electra.py"),
                                                                 ("UserWarning", "modeling_electra.py"),
                                                                 ("TracerWarning", "modeling_electra.py")]
