"""Reproduce the embedded model family: corpus, tokenizers, target, drafts, cards.

Entry point: ``python -m specdec_lib train`` (see :mod:`specdec_lib.training.cli`).
"""
