"""The ONNX Runtime backend of `serving.engine`: one session on CPU, CUDA or TensorRT.

On a GPU the inputs and the output are bound to the device per call (IO binding): without it ONNX Runtime
copies through numpy on every call and loses to PyTorch. TensorRT is told the largest batch shape to expect
(`TRT_MAX_BATCH`), so the engine never sends more rows than it built its engine for.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from textdata.cpu_limits import ThreadPlan, plan_threads, read_limits

ORT_NAMES = {"tensorrt": "TensorrtExecutionProvider", "cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
# Largest batch shape TensorRT is told to expect; beyond it TensorRT would rebuild its engine.
TRT_MAX_BATCH = 64


def usable_cores() -> int:
    """Cores this process may use: affinity and cgroup quota (textdata/cpu_limits.py)."""
    return read_limits().usable


class OrtRunner:
    """One ONNX Runtime session; `provider` is where it runs (cpu, cuda, tensorrt)."""

    backend = "onnx"

    def __init__(self, model_file: Path, provider: str, threads: int | ThreadPlan | None, max_length: int):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.inter_op_num_threads = 1
        self.threads = None
        if provider == "cpu":
            # Threads from the cores this process may use minus those other work keeps busy; spin-waiting
            # between operators off where cores are shared (textdata/cpu_limits.py, docs/serving.md "Shared cores").
            # a ThreadPlan comes from a caller that knows its workload (batch scoring: serving/scoring.py)
            self.threads = threads if isinstance(threads, ThreadPlan) else plan_threads(requested=threads)
            opts.intra_op_num_threads = self.threads.threads
            opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.threads.spinning else "0")
        providers: list = [ORT_NAMES[provider]]
        if provider == "tensorrt":
            cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "electra-classify", "trt")
            cache.mkdir(parents=True, exist_ok=True)
            import onnx

            names = [i.name for i in onnx.load(str(model_file), load_external_data=False).graph.input]
            shapes = lambda b, s: ",".join(f"{n}:{b}x{s}" for n in names)
            providers = [("TensorrtExecutionProvider", {
                "trt_fp16_enable": True, "trt_engine_cache_enable": True, "trt_engine_cache_path": str(cache),
                "trt_profile_min_shapes": shapes(1, 1), "trt_profile_opt_shapes": shapes(16, 64),
                "trt_profile_max_shapes": shapes(TRT_MAX_BATCH, max_length),
            }), "CUDAExecutionProvider"]
        if provider != "cpu":
            providers.append("CPUExecutionProvider")
        self.session = ort.InferenceSession(str(model_file), sess_options=opts, providers=providers)
        got = self.session.get_providers()[0]
        if got != ORT_NAMES[provider]:
            # ONNX Runtime silently falls back to CPU when CUDA libraries are missing; we want to know.
            raise RuntimeError(f"asked for {ORT_NAMES[provider]}, ONNX Runtime gave {got}")
        self.provider = provider
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name
        self.max_batch = TRT_MAX_BATCH if provider == "tensorrt" else None

    def width(self, longest: int) -> int:
        return longest  # any shape runs: no padding beyond the batch's longest text

    def describe(self) -> dict:
        return {"precision": "float32", "cuda_graphs": 0, "cuda_graph_error": None, "precision_check": None,
                "cpu_threads": self.threads.as_dict() if self.threads else None}

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        if self.provider == "cpu":
            return self.session.run([self.output_name], feeds)[0]
        # IO binding: without it ONNX Runtime on GPU copies through numpy per call and loses to PyTorch.
        # One binding per call, so concurrent callers never share one.
        binding = self.session.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        binding.bind_output(self.output_name, "cuda")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]
