"""Toolkit 1 command modules (``python -m rknn.bin.visualization``)."""
