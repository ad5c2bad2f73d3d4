"""The server product: JSON API (`/v1`) and Gradio labeling UI (`/ui`) on one serving engine.

Entry point: `python -m app --model OUT` (see app/__main__.py). The server imports only `serving/` and
`textdata/`; `app/train_child.py` runs only as the training job's child process and imports `finetune/`.
"""
