"""Compatibility package: ``from rknn.api import RKNN`` runs on openrknn."""
