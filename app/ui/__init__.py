"""The Gradio UI at /ui, one module per tab (page.py assembles them)."""
