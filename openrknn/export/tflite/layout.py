"""Tensor layouts between the structural ONNX graph (NCHW) and the exported TFLite graph (NHWC).

Each exported tensor keeps a *storage permutation*: storage axis ``i`` holds the ONNX (logical)
axis ``perm[i]``. 4-D activations are stored NHWC (``(0, 2, 3, 1)``), everything else as is.
"""
from __future__ import annotations

import numpy as np

NHWC = (0, 2, 3, 1)


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def default_perm(rank: int) -> tuple[int, ...]:
    return NHWC if rank == 4 else identity(rank)


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def stored_shape(shape: list[int], perm: tuple[int, ...]) -> list[int]:
    return [int(shape[p]) for p in perm]


def transpose_perm(onnx_perm: tuple[int, ...], perm_in: tuple[int, ...], perm_out: tuple[int, ...]) -> tuple[int, ...]:
    """The TFLite TRANSPOSE permutation (storage axes) of an ONNX Transpose(``onnx_perm``)."""
    to_storage_in = inverse(perm_in)
    return tuple(to_storage_in[onnx_perm[p]] for p in perm_out)


def conversion_perm(perm_from: tuple[int, ...], perm_to: tuple[int, ...]) -> tuple[int, ...]:
    """TRANSPOSE permutation turning a tensor stored as ``perm_from`` into ``perm_to``."""
    return transpose_perm(identity(len(perm_from)), perm_from, perm_to)


def same_memory(shape: list[int], perm: tuple[int, ...]) -> bool:
    """Whether storing ``shape`` by ``perm`` keeps the element order (only size-1 axes move)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


def storage_axis(axis: int, perm: tuple[int, ...]) -> int:
    return inverse(perm)[axis % len(perm)]


def constant_for(array: np.ndarray, rank: int, perm: tuple[int, ...]) -> np.ndarray:
    """A broadcasting constant of an element-wise op, in the storage layout of its rank-``rank`` peer."""
    array = np.asarray(array)
    if array.ndim == 0 or array.size == 1:
        return array.reshape(())
    array = array.reshape((1,) * (rank - array.ndim) + array.shape)
    return np.transpose(array, perm)
