"""Labeling sessions on disk, suspects reviews, the review queue of 'not sure' answers, the live audit."""
