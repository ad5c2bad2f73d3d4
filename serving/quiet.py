"""Library messages that are understood and say nothing to our users, dropped one by one (by logger and
text); everything else those loggers say still shows."""

from __future__ import annotations

import contextlib
import logging

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
        yield
    finally:
        for logger, f in filters:
            logger.removeFilter(f)
