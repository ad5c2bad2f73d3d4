"""The request shapes existing Hugging Face clients send, answered by the same engine as /v1/classify.

- `POST /`: the Inference API / Inference Endpoints text-classification shape that
  `huggingface_hub.InferenceClient(URL).text_classification(text)` sends: `{"inputs": ..., "parameters":
  {"top_k": k, "function_to_apply": "softmax"}}`; the answer is one list of `{label, score}` per input,
  most likely first.
- `POST /predict`: text-embeddings-inference's classification route, `{"inputs": "..." | [...]}`; the
  answer is one list of `{label, score}` for one text, a list of such lists for a list of texts.

Both go through `classify_texts` from api.py: the same per-request limits, batcher, queue and timeout;
the gate in front of every route applies the same auth and body limit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

RESPONSES = {422: {"description": "invalid field (named)"}, 429: {"description": "queue full; see Retry-After"},
             503: {"description": "starting or shutting down"}, 504: {"description": "no answer in time"}}


class HFParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: StrictInt | None = Field(None, ge=1, description="keep only the k most likely labels")
    # The engine answers softmax probabilities; another function would need the raw logits.
    function_to_apply: Literal["softmax"] | None = Field(None, description="only 'softmax' (the default)")


class HFRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: StrictStr | list[StrictStr] = Field(description="one text or a list of texts")
    parameters: HFParameters | None = None
    # Inference API options (wait_for_model, use_cache): accepted, and moot here: the model is loaded.
    options: dict | None = None


class TEIRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: StrictStr | list[StrictStr] = Field(description="one text or a list of texts (no pairs)")
    # Texts are always cut at the model's maximum length, as on /v1/classify.
    truncate: StrictBool | None = None
    truncation_direction: Literal["Right", "right"] | None = None
    raw_scores: Literal[False] | None = Field(None, description="only false: answers are probabilities")


def _ranked(pred, top_k: int | None) -> list[dict]:
    ranked = sorted(pred.probabilities.items(), key=lambda kv: -kv[1])
    return [{"label": label, "score": score} for label, score in ranked[:top_k]]


def add_hf_routes(app: FastAPI, classify_texts: Callable[..., Awaitable[list]]) -> None:
    async def run(inputs: str | list[str], request: Request) -> list:
        single = isinstance(inputs, str)
        return await classify_texts([inputs] if single else inputs, "inputs", single, request)

    @app.post("/", summary="Hugging Face Inference API: text classification", responses=RESPONSES)
    async def hf_inference(req: HFRequest, request: Request):
        top_k = req.parameters.top_k if req.parameters else None
        return JSONResponse([_ranked(p, top_k) for p in await run(req.inputs, request)])

    @app.post("/predict", summary="text-embeddings-inference: classification", responses=RESPONSES)
    async def tei_predict(req: TEIRequest, request: Request):
        ranked = [_ranked(p, None) for p in await run(req.inputs, request)]
        return JSONResponse(ranked[0] if isinstance(req.inputs, str) else ranked)
