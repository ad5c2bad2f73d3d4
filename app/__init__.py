"""The server product: JSON API (`/v1`) and Gradio labeling UI (`/ui`) on one serving engine.

Entry point: `python -m app --model OUT` (see app/__main__.py). The server imports only `serving/`,
`textdata/`, `baseline/` and `labelstore/`; `app/versions/train_child.py` runs only as the training job's child
process and imports `finetune/`.

One room per concern (each subpackage's docstring says what it holds):
- `config.py`, `server.py`, `__main__.py`: the settings, the assembly of the server, the command line;
  `label_kinds.py`: what the app does per kind of labels, picked once.
- `http/`: the API's routes and what every request passes through (auth, bounds, logs, metrics, batching).
- `ui/`: the Gradio page, one module per tab.
- `labeling/`: labeling sessions, suspects reviews, the review queue, the live audit.
- `team/`: datasets with a shared queue, users and tokens, agreement (on the label store, `labelstore/`).
- `versions/`: retraining jobs and the training child, the registry, the swap with no downtime.
- `monitoring/`: drift, class mix, live precision.
- `llm/`: the cascade to an LLM and its answers kept as teacher labels.
- `fleet/`: several replicas on one database (two-phase promotion, one trainer, the object store).
"""
