"""The learning loop's versions: retraining jobs, the training child, the registry, the swap with no downtime."""
