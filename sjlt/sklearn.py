"""scikit-learn transformers over :mod:`sjlt.functional`: :class:`SparseJLProjection`, :class:`FeatureDropout`.

Both hold a 64-bit seed instead of a random matrix or mask: fitting stores a handful of ints, and
every projection or mask is regenerated from the seed when it is needed.
"""
from __future__ import annotations

import numbers
import sys
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch
from sklearn import get_config
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.exceptions import DataDimensionalityWarning
from sklearn.random_projection import johnson_lindenstrauss_min_dim
from sklearn.utils import assert_all_finite, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import functional as F
from . import spec

__all__ = ["SparseJLProjection", "FeatureDropout", "seed_from_random_state"]

_SEED_END = 1 << 64

#: ``random_state`` values both estimators take: sklearn's usual ones, widened to the full
#: 64-bit seed range, plus numpy Generators.
_RANDOM_STATE_CONSTRAINT = [
    Interval(Integral, 0, _SEED_END - 1, closed="both"),
    np.random.RandomState,
    np.random.Generator,
    None,
]

#: With ``device="auto"``, dense inputs of at least this many elements go through the GPU: below
#: it, host-device transfers and launch latency cost more than the CPU projection.
_GPU_MIN_ELEMENTS = 1 << 22

#: Bytes of input per chunk on the GPU path: large enough for full-speed DMA, small enough that
#: two pinned staging buffers per direction stay modest.
_GPU_CHUNK_BYTES = 64 << 20

#: Chunks in flight on the GPU path: while one is copied and projected, the host stages the next.
_PIPELINE_DEPTH = 2

_TORCH_REAL = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: Base class of scipy's sparse arrays (public from scipy 1.11; an empty tuple matches nothing).
_SPARSE_ARRAY = getattr(sp, "sparray", ())


def seed_from_random_state(random_state) -> int:
    """The 64-bit sjlt seed that a scikit-learn ``random_state`` stands for.

    - an int in [0, 2**64) *is* the seed: no generator is involved, so the projection or mask is
      the same on every machine, device, and numpy version;
    - ``None`` or a ``numpy.random.RandomState``: one ``randint(0, 2**64, dtype=uint64)`` draw from
      ``sklearn.utils.check_random_state(random_state)``; ``None`` means numpy's global
      RandomState, so ``np.random.seed`` makes it reproducible;
    - a ``numpy.random.Generator``: one ``integers(0, 2**64, dtype=uint64)`` draw.

    Draws advance the generator, as they do for any scikit-learn estimator fitted with it.
    """
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, _SEED_END, dtype=np.uint64))
    if isinstance(random_state, numbers.Integral):  # bools too: check_seed rejects them
        return spec.check_seed(random_state, "random_state")
    generator = check_random_state(random_state)
    return int(generator.randint(0, _SEED_END, dtype=np.uint64))


def _is_dask_array(X) -> bool:
    # An input can only be a dask array if dask.array is already imported: no import here.
    dask_array = sys.modules.get("dask.array")
    return dask_array is not None and isinstance(X, dask_array.Array)


def _sparse_interface() -> str:
    """'sparray' or 'spmatrix': scikit-learn >= 1.9 makes this a config option; before, spmatrix."""
    return get_config().get("sparse_interface", "spmatrix")


def _as_configured_sparse(matrix):
    if _sparse_interface() == "sparray":
        return matrix if isinstance(matrix, _SPARSE_ARRAY) else sp.csr_array(matrix)
    return matrix if sp.isspmatrix(matrix) else sp.csr_matrix(matrix)


def _tensor_of_array(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (read only here), copying only what torch cannot view."""
    if any(stride < 0 for stride in array.strides) or not array.flags.aligned:
        array = np.ascontiguousarray(array)
    with warnings.catch_warnings():
        # Read-only arrays (memmaps, broadcasts) are fine: the projection never writes its input.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable",
                                category=UserWarning)
        return torch.from_numpy(array)


def _check_tensor(X: torch.Tensor, estimator, *, expected_features: int | None,
                  what: str = "features") -> torch.Tensor:
    """sklearn's input checks (2-D, non-empty, real, finite, feature count) for a torch tensor.

    Integer and bool tensors become float64, as integer arrays do; floating tensors keep their
    dtype and device. The messages are scikit-learn's own.
    """
    name = type(estimator).__name__
    if X.layout != torch.strided:
        raise TypeError(f"{name} takes dense torch tensors, got layout {X.layout}; call .to_dense() "
                        f"first, or pass a scipy.sparse matrix")
    if X.dim() != 2:
        raise ValueError(f"Expected 2D array, got a tensor of shape {tuple(X.shape)} instead; "
                         f"reshape it to (n_samples, n_{what})")
    if X.is_complex():
        raise ValueError("Complex data not supported\n" + str(X))
    if X.shape[0] < 1:
        raise ValueError(f"Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum "
                         f"of 1 is required by {name}.")
    if X.shape[1] < 1:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(X.shape)}) while a minimum "
                         f"of 1 is required by {name}.")
    if expected_features is not None and X.shape[1] != expected_features:
        raise ValueError(f"X has {X.shape[1]} {what}, but {name} is expecting {expected_features} "
                         f"{what} as input.")
    if X.dtype not in _TORCH_REAL:
        X = X.to(torch.float64)
    if not get_config()["assume_finite"] and not bool(torch.isfinite(X).all()):
        if bool(torch.isnan(X).any()):
            raise ValueError("Input X contains NaN.")
        raise ValueError(f"Input X contains infinity or a value too large for {X.dtype}.")
    return X


def _reset_shape_attributes(estimator, n_features: int) -> None:
    """What ``validate_data(reset=True)`` records, for inputs it cannot read (tensors, dask)."""
    estimator.n_features_in_ = int(n_features)
    if hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_


class SparseJLProjection(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Sparse Johnson-Lindenstrauss random projection, a drop-in for ``SparseRandomProjection``.

    ``transform(X)`` returns ``X @ S.T`` for the seeded k x d sparse JL matrix S of sjlt
    (``nnz`` nonzeros of +-1/sqrt(nnz) in every column, one in each of nnz row blocks; see
    ``docs/spec.md``). Unlike scikit-learn's random projections, nothing of size k x d is ever
    stored: ``fit`` records the shape and a 64-bit seed, and S is regenerated on use. Every column
    of S has exactly ``nnz`` nonzeros, so sparse inputs are never mapped to zero.

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        Output dimension k. "auto" takes
        ``sklearn.random_projection.johnson_lindenstrauss_min_dim(n_samples, eps=eps)``.
    eps : float, default=0.1
        Distortion bound used by ``n_components="auto"``.
    nnz : int or None, default=None
        Nonzeros per column of S, in [1, n_components_]; None means
        ``sjlt.spec.default_nnz(n_components_)`` (8, or n_components_ / 16 below 128).
    random_state : int in [0, 2**64), RandomState, Generator or None, default=None
        Source of the seed; see :func:`seed_from_random_state`. An int is the seed itself, so
        it gives the same projection on every machine and device.
    dense_output : bool, default=True
        For scipy.sparse input: return a dense ndarray (True) or a sparse matrix (False).
        Dense inputs always give dense outputs.
    device : "auto", "cpu", "cuda" or torch.device, default="auto"
        Where numpy inputs are projected. "auto" uses the GPU for inputs of at least
        2**22 elements when ``torch.cuda.is_available()``. Torch tensors are always projected on
        their own device, and sparse inputs with scipy on the CPU. For dask arrays it is passed
        to ``sjlt.dask.project``, where "auto" means each worker's GPU when it has one.
    batch_size : int or None, default=None
        Rows projected at a time for numpy inputs, bounding temporary memory. None projects
        everything at once on the CPU and in chunks of about 64 MiB on the GPU.

    Attributes
    ----------
    n_components_ : int
        Output dimension k.
    nnz_ : int
        Nonzeros per column of S.
    seed_ : int
        The 64-bit seed of S.
    n_features_in_ : int
        Number of input features d.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names, when ``fit`` saw a DataFrame with string column names.
    components_ : scipy.sparse CSR matrix of shape (n_components_, n_features_in_)
        S, materialised (float64) on each access and never cached; avoid it for huge d.

    Notes
    -----
    Supported inputs of ``transform``: numpy arrays and array-likes (float32 stays float32,
    float64 stays float64, integers become float64), scipy.sparse CSR/CSC matrices (projected
    without densifying), pandas DataFrames, torch tensors (returned as tensors on the same device,
    floating dtypes kept), and dask arrays (returned lazily, through ``sjlt.dask.project``).
    ``fit`` on a dask array reads its shape only, and ``transform`` does not check a dask array
    for NaN or inf, which would compute it.
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "eps": [Interval(Real, 0, None, closed="neither")],
        "nnz": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": _RANDOM_STATE_CONSTRAINT,
        "dense_output": ["boolean"],
        "device": [StrOptions({"auto", "cpu", "cuda"}), torch.device],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(self, n_components="auto", *, eps=0.1, nnz=None, random_state=None,
                 dense_output=True, device="auto", batch_size=None):
        self.n_components = n_components
        self.eps = eps
        self.nnz = nnz
        self.random_state = random_state
        self.dense_output = dense_output
        self.device = device
        self.batch_size = batch_size

    # ---------------------------------------------------------------------------------------
    # fit
    # ---------------------------------------------------------------------------------------

    def fit(self, X, y=None):
        """Choose k and draw the seed; only X's shape is used (and, for arrays, its validity).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor, dask array} of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        self : SparseJLProjection
        """
        self._validate_params()
        if isinstance(self.device, torch.device) and self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or a torch.device of type cpu "
                             f"or cuda, got {self.device}")
        if isinstance(X, torch.Tensor):
            X = _check_tensor(X, self, expected_features=None)
            n_samples, n_features = X.shape
            _reset_shape_attributes(self, n_features)
        elif _is_dask_array(X):
            if X.ndim != 2:
                raise ValueError(f"Expected 2D array, got a dask array of shape {X.shape} instead")
            n_samples, n_features = X.shape
            if not np.isfinite(n_features):
                raise ValueError("this dask array does not know its number of columns: call "
                                 "X.compute_chunk_sizes() first")
            if self.n_components == "auto" and not np.isfinite(n_samples):
                raise ValueError("n_components='auto' needs the number of rows, which this dask "
                                 "array does not know: call X.compute_chunk_sizes() first, or "
                                 "pass an int n_components")
            _reset_shape_attributes(self, n_features)
        else:
            X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32])
            n_samples, n_features = X.shape

        self.n_components_ = self._output_dimension(n_samples, int(n_features))
        self.nnz_ = spec.resolve_nnz(self.nnz, self.n_components_)
        self.seed_ = seed_from_random_state(self.random_state)
        # ClassNamePrefixFeaturesOutMixin reads this. sklearn's own estimators store the
        # n_components *parameter* here, which is why their feature names fail with "auto".
        self._n_features_out = self.n_components_
        return self

    def _output_dimension(self, n_samples, n_features: int) -> int:
        """k, with SparseRandomProjection's errors and warning for an unreduced dimension.

        ``n_samples`` is read only for "auto" (a dask array may not know it otherwise).
        """
        if self.n_components == "auto":
            n_samples = int(n_samples)
            k = int(johnson_lindenstrauss_min_dim(n_samples=n_samples, eps=self.eps))
            if k <= 0:
                raise ValueError(f"eps={self.eps:f} and n_samples={n_samples} lead to a target "
                                 f"dimension of {k} which is invalid")
            if k > n_features:
                raise ValueError(f"eps={self.eps:f} and n_samples={n_samples} lead to a target "
                                 f"dimension of {k} which is larger than the original space with "
                                 f"n_features={n_features}")
            return k
        if self.n_components > n_features:
            # SparseRandomProjection's text verbatim (missing space included), so that warning
            # filters written for it match this one too.
            warnings.warn(
                f"The number of components is higher than the number of features: n_features < "
                f"n_components ({n_features} < {self.n_components}).The dimensionality of the "
                f"problem will not be reduced.",
                DataDimensionalityWarning,
            )
        return int(self.n_components)

    # ---------------------------------------------------------------------------------------
    # S on demand
    # ---------------------------------------------------------------------------------------

    @property
    def components_(self):
        """S (n_components_ x n_features_in_) as a float64 scipy CSR matrix, built on each access."""
        check_is_fitted(self)
        return self._scipy_matrix(np.float64)

    def __dir__(self):
        # BaseEstimator.__dir__ calls hasattr on every name, and scikit-learn's HTML repr runs
        # inspect.getmembers on every notebook display: both would build S. Same filter, minus S.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            return [name for name in object.__dir__(self)
                    if name != "components_" and hasattr(self, name)]

    def _scipy_matrix(self, dtype, *, sparray: bool | None = None):
        S = F.sparse_jl_matrix(self.n_features_in_, self.n_components_, seed=self.seed_,
                               nnz=self.nnz_, dtype=torch.float64)
        rows, cols = S.indices().numpy()
        values = S.values().numpy().astype(dtype, copy=False)
        if sparray is None:
            sparray = _sparse_interface() == "sparray"
        matrix_type = sp.csr_array if sparray else sp.csr_matrix
        return matrix_type((values, (rows, cols)), shape=(self.n_components_, self.n_features_in_))

    # ---------------------------------------------------------------------------------------
    # transform
    # ---------------------------------------------------------------------------------------

    def transform(self, X):
        """Project X: ``X @ S.T``.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor, dask array} of shape (n_samples, n_features)

        Returns
        -------
        X_new : of shape (n_samples, n_components_)
            The same kind of container as X: ndarray (sparse matrix for sparse X with
            ``dense_output=False``), torch tensor on X's device, or lazy dask array.
        """
        check_is_fitted(self)
        if isinstance(X, torch.Tensor):
            X = _check_tensor(X, self, expected_features=self.n_features_in_)
            return F.sparse_jl(X, self.n_components_, seed=self.seed_, nnz=self.nnz_)
        if _is_dask_array(X):
            return self._transform_dask(X)
        # Dense X skips sklearn's finiteness pass over X (a full read of the input, about a third
        # of the projection's time) and checks the 4x smaller output instead: every column of S
        # has nnz >= 1 nonzeros, so a NaN or inf anywhere in X reaches the output. Only then is X
        # itself checked, so the error is sklearn's standard one.
        X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32],
                          reset=False, ensure_all_finite=False)
        if sp.issparse(X):
            assert_all_finite(X, estimator_name=type(self).__name__, input_name="X")
            return self._transform_sparse(X)
        projected = self._transform_dense(X)
        # The sum is a fast screen; a large finite output can sum to inf, so confirm per entry.
        if not np.isfinite(projected.sum()) and not np.isfinite(projected).all():
            assert_all_finite(X, estimator_name=type(self).__name__, input_name="X")
            raise ValueError(f"{type(self).__name__}: the projection of X overflowed {X.dtype} "
                             f"although X is finite; pass float64 data")
        return projected

    def _transform_sparse(self, X):
        S = self._scipy_matrix(X.dtype, sparray=isinstance(X, _SPARSE_ARRAY))
        projected = X @ S.T
        if self.dense_output:
            return projected.toarray() if sp.issparse(projected) else np.asarray(projected)
        return _as_configured_sparse(projected)

    def _transform_dense(self, X: np.ndarray) -> np.ndarray:
        device = self._device_for(X.size)
        x = _tensor_of_array(X)
        n_samples, n_features = X.shape
        if device.type == "cuda":
            rows = self.batch_size or max(1, _GPU_CHUNK_BYTES // (n_features * X.itemsize))
            out = np.empty((n_samples, self.n_components_), dtype=X.dtype)
            _project_host_rows_on_gpu(x, torch.from_numpy(out), self.n_components_, seed=self.seed_,
                                      nnz=self.nnz_, device=device, rows_per_chunk=rows)
            return out
        rows = self.batch_size or n_samples
        if rows >= n_samples:
            return F.sparse_jl(x, self.n_components_, seed=self.seed_, nnz=self.nnz_).numpy()
        out = np.empty((n_samples, self.n_components_), dtype=X.dtype)
        out_t = torch.from_numpy(out)
        for start in range(0, n_samples, rows):
            out_t[start:start + rows] = F.sparse_jl(x[start:start + rows], self.n_components_,
                                                    seed=self.seed_, nnz=self.nnz_)
        return out

    def _device_for(self, n_elements: int) -> torch.device:
        if self.device == "auto":
            use_gpu = n_elements >= _GPU_MIN_ELEMENTS and torch.cuda.is_available()
            return torch.device("cuda" if use_gpu else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device={self.device!r} but torch.cuda.is_available() is False; use "
                               f"device='auto' (GPU when present) or device='cpu'")
        return device

    def _transform_dask(self, X):
        if X.ndim != 2:
            raise ValueError(f"Expected 2D array, got a dask array of shape {X.shape} instead")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if X.dtype not in (np.float32, np.float64):
            if np.issubdtype(X.dtype, np.complexfloating):
                raise ValueError("Complex data not supported")
            X = X.astype(np.float64)
        from . import dask as sjlt_dask  # lazily: dask is an optional dependency

        return sjlt_dask.project(X, self.n_components_, seed=self.seed_, nnz=self.nnz_,
                                 device=str(self.device))

    # ---------------------------------------------------------------------------------------
    # Back to the input space
    # ---------------------------------------------------------------------------------------

    def inverse_transform(self, X):
        """The least-squares preimage: ``X @ pinv(S).T``, with pinv the Moore-Penrose inverse.

        Computed as ``(X @ pinv(G)) @ S`` through the k x k Gram matrix ``G = S S^T`` (built
        sparse), since pinv(S) = S^T pinv(S S^T): no dense d x k matrix is formed. Cost: one
        k x k symmetric pseudo-inverse plus one :func:`sjlt.functional.sparse_jl_transpose`.
        For k <= d, S has full row rank with probability ~1 and ``transform(inverse_transform(Y))``
        returns Y. Eigenvalues of G below scipy's ``pinvh`` cutoff count as zero, so singular values
        of S below about 1e-7 (float64) of the largest are dropped.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_components_)

        Returns
        -------
        X_original : ndarray (or tensor, for tensor input) of shape (n_samples, n_features_in_)
            Dense, in X's floating dtype.
        """
        check_is_fitted(self)
        X = self._checked_projected(X)
        S = self._scipy_matrix(np.float64, sparray=False)
        pinv_gram = scipy.linalg.pinvh((S @ S.T).toarray())
        if isinstance(X, torch.Tensor):
            coefficients = X @ torch.from_numpy(pinv_gram).to(dtype=X.dtype, device=X.device)
        else:
            coefficients = _tensor_of_array(np.ascontiguousarray(X @ pinv_gram.astype(X.dtype)))
        return self._adjoint(coefficients, X)

    def adjoint_transform(self, X):
        """``X @ S``: the adjoint (transpose) of :meth:`transform`, NOT an inverse.

        Cheap (no matrix is formed) and exact for the transpose, but
        ``adjoint_transform(transform(x))`` only approximates x for nearly orthogonal rows of S;
        use :meth:`inverse_transform` for the least-squares preimage.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_components_)

        Returns
        -------
        X_back : of shape (n_samples, n_features_in_)
            ndarray, tensor for tensor input, sparse for sparse input with ``dense_output=False``.
        """
        check_is_fitted(self)
        X = self._checked_projected(X)
        if sp.issparse(X):
            back = X @ self._scipy_matrix(X.dtype, sparray=isinstance(X, _SPARSE_ARRAY))
            if self.dense_output:
                return back.toarray() if sp.issparse(back) else np.asarray(back)
            return _as_configured_sparse(back)
        if isinstance(X, torch.Tensor):
            return self._adjoint(X, X)
        return self._adjoint(_tensor_of_array(X), X)

    def _checked_projected(self, X):
        """Validates an (n_samples, n_components_) input of the inverse maps."""
        if isinstance(X, torch.Tensor):
            return _check_tensor(X, self, expected_features=self.n_components_, what="components")
        X = check_array(X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32])
        if X.shape[1] != self.n_components_:
            raise ValueError(f"X has {X.shape[1]} components, but {type(self).__name__} is "
                             f"expecting {self.n_components_} components as input.")
        return X

    def _adjoint(self, y: torch.Tensor, original):
        back = F.sparse_jl_transpose(y, self.n_features_in_, seed=self.seed_, nnz=self.nnz_)
        return back if isinstance(original, torch.Tensor) else back.numpy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags


def _project_host_rows_on_gpu(x: torch.Tensor, out: torch.Tensor, out_features: int, *, seed: int,
                              nnz: int, device: torch.device, rows_per_chunk: int) -> None:
    """out = x S^T for host tensors x and out, projected on ``device`` chunk by chunk.

    Each chunk is staged into a pinned buffer, copied to the GPU, projected and copied back on
    its own CUDA stream, so while the GPU moves and projects one chunk, the host stages the next
    (and pageable memory never blocks the DMA engines). Host buffers are reused only after the
    event of their previous chunk has fired.
    """
    n_samples, n_features = x.shape
    rows = min(rows_per_chunk, n_samples)
    with torch.cuda.device(device):
        streams = [torch.cuda.Stream() for _ in range(_PIPELINE_DEPTH)]
        staged_in = [torch.empty((rows, n_features), dtype=x.dtype, pin_memory=True)
                     for _ in range(_PIPELINE_DEPTH)]
        staged_out = [torch.empty((rows, out_features), dtype=x.dtype, pin_memory=True)
                      for _ in range(_PIPELINE_DEPTH)]
        in_flight = [None] * _PIPELINE_DEPTH

        def collect(slot):
            done, start, stop = in_flight[slot]
            done.synchronize()
            out[start:stop].copy_(staged_out[slot][:stop - start])
            in_flight[slot] = None

        starts = range(0, n_samples, rows)
        for chunk, start in enumerate(starts):
            slot = chunk % _PIPELINE_DEPTH
            stop = min(start + rows, n_samples)
            if in_flight[slot] is not None:
                collect(slot)
            staged_in[slot][:stop - start].copy_(x[start:stop])
            with torch.cuda.stream(streams[slot]):
                x_device = staged_in[slot][:stop - start].to(device, non_blocking=True)
                y_device = F.sparse_jl(x_device, out_features, seed=seed, nnz=nnz)
                staged_out[slot][:stop - start].copy_(y_device, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
            in_flight[slot] = (done, start, stop)
        for offset in range(1, _PIPELINE_DEPTH + 1):  # oldest first
            slot = (len(starts) - 1 + offset) % _PIPELINE_DEPTH
            if in_flight[slot] is not None:
                collect(slot)


class FeatureDropout(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Seeded dropout as a transformer: dropout while training, identity at inference.

    ``fit_transform(X)`` is the training pass: each element is zeroed with probability ``p`` and
    the survivors are scaled by 1/(1-p) (:func:`sjlt.functional.seeded_dropout`). ``transform(X)``
    is the inference pass and returns X unchanged, like ``nn.Dropout`` in eval mode. In a
    ``Pipeline``, ``fit`` therefore trains the next steps on dropped-out data, while ``predict``
    and ``transform`` see the clean data.

    The mask is regenerated from ``seed_`` and the element's row-major index ``i * n_features + j``;
    it does not depend on the values of X. So ``fit_transform`` with the same int ``random_state``
    on data of the same shape drops the same elements every time, on every machine and device.
    With a RandomState, Generator or None, each ``fit``/``fit_transform`` draws a new seed
    (see :func:`seed_from_random_state`).

    It takes array-likes (numpy, pandas); for torch tensors use :class:`sjlt.nn.SeededDropout`.
    Because ``fit_transform(X)`` differs from ``fit(X).transform(X)`` by design, scikit-learn's
    checks that require them to agree are expected to fail for this estimator.

    Parameters
    ----------
    p : float in [0, 1], default=0.1
        Drop probability.
    random_state : int in [0, 2**64), RandomState, Generator or None, default=None
        Source of the seed; see :func:`seed_from_random_state`.

    Attributes
    ----------
    seed_ : int
        Seed of the mask of the latest ``fit``/``fit_transform``.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
    """

    _parameter_constraints: dict = {
        "p": [Interval(Real, 0, 1, closed="both")],
        "random_state": _RANDOM_STATE_CONSTRAINT,
    }

    def __init__(self, p=0.1, *, random_state=None):
        self.p = p
        self.random_state = random_state

    def fit(self, X, y=None):
        """Record the input shape and draw the seed of the mask."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit, then apply dropout (the training pass)."""
        X = self._fit(X)
        if self.p == 0.0:
            return X
        dropped = F.seeded_dropout(_tensor_of_array(X), self.p, seed=self.seed_)
        return dropped.numpy()

    def transform(self, X):
        """Return X validated and unchanged (the inference pass)."""
        check_is_fitted(self)
        return validate_data(self, X, dtype=[np.float64, np.float32], reset=False)

    def _fit(self, X) -> np.ndarray:
        self._validate_params()
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        self.seed_ = seed_from_random_state(self.random_state)
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
