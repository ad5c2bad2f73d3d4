"""The request shapes existing Hugging Face clients send, answered by the same engine as /v1/classify.

- `POST /`: the Inference API / Inference Endpoints text-classification shape that
  `huggingface_hub.InferenceClient(URL).text_classification(text)` sends: `{"inputs": ..., "parameters":
  {"top_k": k, "function_to_apply": "softmax"}}`; the answer is one list of `{label, score}` per input,
  most likely first.
- `POST /predict`: text-embeddings-inference's classification route, `{"inputs": "..." | [...]}`; the
  answer is one list of `{label, score}` for one text, a list of such lists for a list of texts.

Both go through `classify_texts` from api.py: the same per-request limits, batcher, queue and timeout;
the gate in front of every route applies the same auth and body limit.

A multi-label model (serving/multilabel.py) answers what those clients get from one: on `POST /`, each
label's sigmoid probability, most likely first (`function_to_apply` "sigmoid", the pipeline's default for
such a model, or "none" for the logits); on `POST /predict`, TEI's `raw_scores: true` gives the logits,
which a TEI client applies a sigmoid to itself (TEI would softmax them otherwise, meaningless across
independent labels: here the default is the sigmoid probabilities). Neither shape carries the thresholds:
`/v1/classify` answers the label set.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from app.label_kinds import kind_of

RESPONSES = {422: {"description": "invalid field (named)"}, 429: {"description": "queue full; see Retry-After"},
             503: {"description": "starting or shutting down"}, 504: {"description": "no answer in time"}}


class HFParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: StrictInt | None = Field(None, ge=1, description="keep only the k most likely labels")
    # A single-label model answers softmax probabilities; a multi-label one sigmoids or, with "none", its logits.
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = Field(
        None, description="single-label models: only 'softmax' (the default); multi-label: 'sigmoid' (the default) "
                          "or 'none' (logits)")


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
    raw_scores: StrictBool | None = Field(None, description="single-label models: only false (probabilities); "
                                          "multi-label: true answers the logits")


def _ranked(pred, top_k: int | None, labels: list[str] | None = None) -> list[dict]:
    """{label, score} most likely first; with `labels` (a multi-label raw-score answer) the logits."""
    scores = pred.raw_scores(labels) if labels is not None else pred.probabilities
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    return [{"label": label, "score": score} for label, score in ranked[:top_k]]


def _refuse(loc: list, msg: str) -> HTTPException:
    return HTTPException(422, [{"type": "value_error", "loc": ["body", *loc], "msg": msg}])


def add_hf_routes(app: FastAPI, classify_texts: Callable[..., Awaitable[list]]) -> None:
    async def run(inputs: str | list[str], request: Request) -> tuple[list, object]:
        """(predictions, the classifier that made them: whether it is multi-label decides the shape)."""
        single = isinstance(inputs, str)
        preds = await classify_texts([inputs] if single else inputs, "inputs", single, request)
        return preds, request.state.served.clf

    @app.post("/", summary="Hugging Face Inference API: text classification", responses=RESPONSES)
    async def hf_inference(req: HFRequest, request: Request):
        params = req.parameters or HFParameters()
        preds, clf = await run(req.inputs, request)
        kind = kind_of(clf.space)
        fn = params.function_to_apply
        if fn is not None and fn not in kind.hf_functions:
            raise _refuse(["parameters", "function_to_apply"], f"{fn!r}: this is {kind.hf_words}; use {kind.hf_allowed}")
        raw = list(clf.labels) if fn == "none" else None  # allowed for a multi-label model only
        return JSONResponse([_ranked(p, params.top_k, raw) for p in preds])

    @app.post("/predict", summary="text-embeddings-inference: classification", responses=RESPONSES)
    async def tei_predict(req: TEIRequest, request: Request):
        preds, clf = await run(req.inputs, request)
        if req.raw_scores and not kind_of(clf.space).raw_scores:
            raise _refuse(["raw_scores"], "only false for this single-label model: answers are probabilities")
        raw = list(clf.labels) if req.raw_scores else None
        ranked = [_ranked(p, None, raw) for p in preds]
        return JSONResponse(ranked[0] if isinstance(req.inputs, str) else ranked)
