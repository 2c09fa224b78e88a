"""Command-line tools: ``openrknn`` and ``python -m rknn.api.rknn_convert``."""
