"""Fine-tuning stage: `python finetune/kfold.py --model KcELECTRA --data notes.csv` (see finetune/kfold.py)."""
