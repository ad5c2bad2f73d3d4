"""What every stage agrees on about text data: reading and writing tables, text normalisation, the label
map, user errors, command-line flags built from a config dataclass, where a model lies in a run folder, and
the numeric choices training and the torch runner share (precision, schedule, batch widths).

`finetune/`, `serving/`, `app/` and `baseline/` import it; it imports none of them. `pretraining/` keeps
marked copies of the few rules it shares (its `lr_at`, `autocast_dtype`, `UsageError`, flag builder) so that
it imports no other package.
"""
