"""Loads of a transformers folder in threads of one process (a fleet replica preparing a promotion while its own
activation loads the same version): transformers builds on the meta device by patching torch process-wide, so
concurrent loads failed with "Cannot copy out of meta tensor" until serving/torch_runner.py took them one at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from serving.engine import Classifier


def test_concurrent_loads_all_succeed_and_answer_alike(tiny_classifier_dir):
    first = Classifier.load(tiny_classifier_dir, provider="torch")  # the imports, as a server's start makes them
    want = first.predict_proba(["꿈에서 봤다"])
    for _ in range(3):
        with ThreadPoolExecutor(4) as pool:
            loaded = list(pool.map(lambda _: Classifier.load(tiny_classifier_dir, provider="torch"), range(4)))
        for clf in loaded:
            assert np.allclose(clf.predict_proba(["꿈에서 봤다"]), want, atol=1e-6)
