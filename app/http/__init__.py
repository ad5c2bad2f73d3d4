"""The HTTP side: the JSON API's routes and what every request passes through (auth, bounds, logs, metrics)."""
