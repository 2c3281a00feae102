"""Reproduce the embedded model family: corpus, tokenizers, target, drafts, cards.

Entry point: ``python -m specdec_tools train`` (see :mod:`specdec_tools.training.cli`).
"""
