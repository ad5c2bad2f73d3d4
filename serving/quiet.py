"""Library messages that are understood and say nothing to our users, dropped one by one (by logger and
text); everything else those loggers say still shows."""

from __future__ import annotations

import contextlib
import logging
import warnings

# (logger, text in the message): why it is safe to drop
UNDERSTOOD = {
    # Optimum's exporter passes the old `torch_dtype` to from_pretrained itself; we pass nothing.
    ("transformers.modeling_utils", "`torch_dtype` is deprecated"),
    ("transformers.configuration_utils", "`torch_dtype` is deprecated"),
    # ONNX Runtime's quant_pre_process is shape inference plus graph optimisation: the graph is already
    # optimised (Optimum O2), and quantize_dynamic/static infer shapes themselves (DefaultTensorType).
    ("root", "consider to run pre-processing before quantization"),
    ("root", "consider pre-processing before quantization"),
}


class _Drop(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextlib.contextmanager
def understood_messages_dropped():
    filters = [(logging.getLogger(None if name == "root" else name), _Drop(text)) for name, text in UNDERSTOOD]
    for logger, f in filters:
        logger.addFilter(f)
    try:
        with warnings.catch_warnings():
            # transformers' models warn while torch traces them for ONNX (TracerWarning: a Python bool from a
            # tensor in the mask code, fixed for the traced shapes): the export's parity gate compares the ONNX
            # model's answers with PyTorch's on real rows, so a trace gone wrong fails there, not silently.
            # Matched by text, not by class: naming torch.jit.TracerWarning here would import torch before a
            # CLI has checked its paths (tests/test_cli_startup.py).
            warnings.filterwarnings("ignore", message=r"(?s).*\bthe trace\b", module=r"transformers\.")
            yield
    finally:
        for logger, f in filters:
            logger.removeFilter(f)
