"""Compatibility package: ``from rknnlite.api import RKNNLite`` runs on openrknn."""
