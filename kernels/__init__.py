"""Triton kernels for sjlt (installed as ``sjlt.kernels``).

Triton code only (``sparse_jl_windowed_gluon`` in Gluon, Triton's dialect with explicit layouts):
no autograd, no numpy. The launchers, the dispatch and the autograd live in
``sjlt.ops``; the pure-PyTorch mirror of every kernel lives in ``sjlt.reference``.
"""
