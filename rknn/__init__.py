"""Compatibility package: ``from rknn.api import RKNN`` runs on openrknn."""
# The vendor's package loads urllib.request on import; example scripts do ``import urllib`` and then call
# ``urllib.request.urlretrieve`` to fetch their model, which works only if the submodule is already loaded.
import urllib.request  # noqa: F401
