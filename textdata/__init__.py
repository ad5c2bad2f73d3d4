"""What every stage agrees on about text data: reading and writing tables, text normalisation, the label
map, user errors, batch widths, precision choice, the learning-rate schedule, and the TF-IDF baseline with
its blend (fitted by finetune, applied by serving).

`finetune/`, `serving/` and `app/` import it; it imports none of them. `pretraining/` keeps marked copies
of the few rules it shares (its `lr_at`, `autocast_dtype`, `UsageError`) so that it imports no other package.
"""
