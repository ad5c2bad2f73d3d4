"""The server product: JSON API (`/v1`) and Gradio labeling UI (`/ui`) on one serving engine.

Entry point: `python -m app --model OUT` (see app/__main__.py). Imports only from `serving/`.
"""
