"""Gradio UI mounted at /ui: Classify, Label, Batch."""

from __future__ import annotations

import gradio as gr


def mount_ui(app, cfg, clf, state):
    with gr.Blocks(title="ELECTRA classifier") as demo, gr.Tab("Classify"):
        text = gr.Textbox(label="Text", lines=4)
        out = gr.Label(label="Prediction")
        gr.Button("Classify").click(lambda t: {p: v for p, v in clf.predict([t])[0].probabilities.items()},
                                    text, out)
    demo.queue(default_concurrency_limit=cfg.ui_concurrency)
    gr.mount_gradio_app(app, demo, path="/ui", ssr_mode=False, max_file_size=int(cfg.max_upload_mb * 1024 * 1024))
