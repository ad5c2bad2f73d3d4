"""Serving: the inference engine (`engine.Classifier`, over the ONNX and PyTorch runners), ONNX export with
its INT8 parity gate (`export`, `quantize`, `parity`), and batch scoring of files, locally (`score`) or on
Ray Data (`score_ray`), both over one scoring core (`scoring`). Imports no training code."""
