"""Team labeling over HTTP: datasets with a shared queue, users and their tokens, agreement."""
