"""ELECTRA pretraining (replaced token detection): `python pretraining/train.py --help`."""
