"""The TF-IDF + logistic-regression baseline every k-fold report shows beside the model, and its blend with
the model: one definition that finetune fits (`blend.py`, `folds.py`) and serving applies with numpy alone
(`tfidf.py`). Multi-label (k-fold --multi-label): a one-vs-rest baseline and a per-label blend (`label_blend.py`),
read by the same `blend.ServedBlend`.

`finetune/`, `serving/` and `app/` import it; it imports `textdata/` and none of the stages.
"""
