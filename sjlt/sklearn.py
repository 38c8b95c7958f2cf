"""scikit-learn transformers over :mod:`sjlt.functional`: :class:`SparseJLProjection`, :class:`FeatureDropout`.

Both hold a 64-bit seed instead of a random matrix or mask: fitting stores a handful of ints, and
every projection or mask is regenerated from the seed when it is needed. Parameters are stored
verbatim by ``__init__`` and checked in ``fit``; inputs are checked with scikit-learn's public
``check_array``/``validate_data``. Dense host inputs are projected by :func:`sjlt.io.rows.project_rows`
(the package's one host<->device pipeline), dask arrays by :mod:`sjlt.io.blocks`, and the device
follows :mod:`sjlt._device`.
"""

from __future__ import annotations

import numbers
import sys
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch
from sklearn import get_config
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, OneToOneFeatureMixin, TransformerMixin
from sklearn.exceptions import DataDimensionalityWarning
from sklearn.random_projection import johnson_lindenstrauss_min_dim
from sklearn.utils import assert_all_finite, check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import functional as F
from . import spec
from ._device import check_device, resolve_device
from ._dtypes import TORCH_FLOAT_DTYPES
from .io.blocks import map_row_blocks
from .io.rows import project_rows, tensor_view

__all__ = ["SparseJLProjection", "FeatureDropout", "seed_from_random_state"]

_SEED_END = 1 << 64

#: The dtypes dense X is validated to (sklearn casts others to the first); float16 is kept so that
#: its widening to float32 happens on the device, not in a host pass.
_DENSE_DTYPES = [np.float64, np.float32, np.float16]

#: With ``device="auto"``, dense inputs of at least this many elements go through the GPU: below
#: it, host-device transfers and launch latency cost more than the CPU projection.
_GPU_MIN_ELEMENTS = 1 << 22

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


def _shape_proxy(shape, dtype) -> np.ndarray:
    """A read-only array of ``shape`` and ``dtype`` that owns one element (every entry aliases
    it): scikit-learn's ``check_array`` and ``validate_data`` judge a tensor's or dask array's
    shape, dtype and feature count from it, with their own messages, without reading or copying
    the data (which may live on a GPU, or not be computed yet)."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def _numpy_dtype_of(tensor: torch.Tensor) -> np.dtype:
    """The numpy dtype that stands for the tensor's in :func:`_shape_proxy`: its own, or float64
    where numpy has none (bfloat16, float8: real numbers that become floats either way)."""
    try:
        return torch.empty(0, dtype=tensor.dtype).numpy().dtype
    except TypeError:
        return np.dtype(np.float64)


def _check_tensor(X: torch.Tensor, estimator, *, reset: bool | None) -> torch.Tensor:
    """scikit-learn's input checks for a torch tensor, which they cannot read without copying it
    to the host: the shape, dtype and feature count through :func:`_shape_proxy` (``reset``:
    as ``validate_data``'s; None checks the shape only), the values (NaN, inf) with torch.

    Integer and bool tensors become float64, as integer arrays do; floating tensors keep their
    dtype and device.
    """
    if X.layout != torch.strided:
        raise TypeError(
            f"{type(estimator).__name__} takes dense torch tensors, got layout "
            f"{X.layout}; call .to_dense() first, or pass a scipy.sparse matrix"
        )
    proxy = _shape_proxy(X.shape, _numpy_dtype_of(X))
    if reset is None:
        check_array(proxy, dtype=None, ensure_all_finite=False, estimator=estimator)
    else:
        validate_data(estimator, proxy, dtype=None, ensure_all_finite=False, reset=reset)
    if X.dtype not in TORCH_FLOAT_DTYPES:
        X = X.to(torch.float64)
    if not get_config()["assume_finite"] and not bool(torch.isfinite(X).all()):
        if bool(torch.isnan(X).any()):
            raise ValueError("Input X contains NaN.")
        raise ValueError(f"Input X contains infinity or a value too large for {X.dtype}.")
    return X


def _check_dask_array(X, estimator, *, reset: bool) -> None:
    """The shape and feature count of a dask array, without computing it (its row count may be
    unknown, NaN)."""
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got a dask array of shape {X.shape} instead")
    if not np.isfinite(X.shape[1]):
        raise ValueError("this dask array does not know its number of columns: call X.compute_chunk_sizes() first")
    validate_data(estimator, _shape_proxy((1, X.shape[1]), X.dtype), dtype=None, ensure_all_finite=False, reset=reset)


def _parameter_error(estimator, name: str, expected: str, error=ValueError):
    """The error of a bad constructor parameter, worded as scikit-learn words its own."""
    return error(
        f"The {name!r} parameter of {type(estimator).__name__} must be {expected}. "
        f"Got {getattr(estimator, name)!r} instead."
    )


def _check_int(estimator, name: str, *, low: int, allow_none: bool = False, also: str = "") -> None:
    value = getattr(estimator, name)
    if allow_none and value is None:
        return
    expected = f"an int >= {low}" + (" or None" if allow_none else "") + also
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _parameter_error(estimator, name, expected, TypeError)
    if value < low:
        raise _parameter_error(estimator, name, expected)


def _check_random_state(estimator) -> None:
    """An int in [0, 2**64) (bools are left to :func:`seed_from_random_state`, which explains
    them), a RandomState, a Generator or None."""
    value = estimator.random_state
    expected = "an int in [0, 2**64), a numpy RandomState or Generator, or None"
    if value is None or isinstance(value, (np.random.RandomState, np.random.Generator, bool)):
        return
    if not isinstance(value, numbers.Integral):
        raise _parameter_error(estimator, "random_state", expected, TypeError)
    if not 0 <= value < _SEED_END:
        raise _parameter_error(estimator, "random_state", expected)


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
        ``sjlt.spec.default_nnz(n_components_)``: 8 (16 from k = 2048, 32 beyond k = 8192),
        trimmed to the fewest blocks of 16-row windows that cover k and to at most k / 16
        (min(8, k) below k = 16).
    random_state : int in [0, 2**64), RandomState, Generator or None, default=None
        Source of the seed; see :func:`seed_from_random_state`. An int is the seed itself, so
        it gives the same projection on every machine and device.
    dense_output : bool, default=True
        For scipy.sparse input: return a dense ndarray (True) or a sparse matrix (False).
        Dense inputs always give dense outputs.
    device : "auto", "cpu", "cuda", "cuda:N" or torch.device, default="auto"
        Where numpy inputs are projected (see :mod:`sjlt._device`). "auto" uses the GPU for inputs of at least
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
    float64 stays float64, float16 becomes float32 on the device that projects it, integers
    become float64), scipy.sparse CSR/CSC matrices (projected
    without densifying), pandas DataFrames, torch tensors (returned as tensors on the same device,
    floating dtypes kept), and dask arrays (returned lazily, through ``sjlt.dask.project``).
    ``fit`` on a dask array reads its shape only, and ``transform`` does not check a dask array
    for NaN or inf, which would compute it.
    """

    def __init__(
        self,
        n_components="auto",
        *,
        eps=0.1,
        nnz=None,
        random_state=None,
        dense_output=True,
        device="auto",
        batch_size=None,
    ):
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
        self._check_parameters()
        if isinstance(X, torch.Tensor):
            X = _check_tensor(X, self, reset=True)
            n_samples, n_features = X.shape
        elif _is_dask_array(X):
            _check_dask_array(X, self, reset=True)
            n_samples, n_features = X.shape
            if self.n_components == "auto" and not np.isfinite(n_samples):
                raise ValueError(
                    "n_components='auto' needs the number of rows, which this dask "
                    "array does not know: call X.compute_chunk_sizes() first, or "
                    "pass an int n_components"
                )
        else:
            X = validate_data(self, X, accept_sparse=["csr", "csc"], dtype=_DENSE_DTYPES)
            n_samples, n_features = X.shape

        self.n_components_ = self._output_dimension(n_samples, int(n_features))
        self.nnz_ = spec.resolve_nnz(self.nnz, self.n_components_)
        self.seed_ = seed_from_random_state(self.random_state)
        # ClassNamePrefixFeaturesOutMixin reads this. sklearn's own estimators store the
        # n_components *parameter* here, which is why their feature names fail with "auto".
        self._n_features_out = self.n_components_
        return self

    def _check_parameters(self) -> None:
        """The constructor's parameters, checked here rather than in ``__init__`` (scikit-learn's
        convention: ``set_params`` and clones must not validate)."""
        if not (isinstance(self.n_components, str) and self.n_components == "auto"):
            _check_int(self, "n_components", low=1, also=' or "auto"')
        if isinstance(self.eps, bool) or not isinstance(self.eps, numbers.Real) or not self.eps > 0:
            raise _parameter_error(self, "eps", "a float > 0")
        _check_int(self, "nnz", low=1, allow_none=True)
        _check_random_state(self)
        if not isinstance(self.dense_output, (bool, np.bool_)):
            raise _parameter_error(self, "dense_output", "a bool", TypeError)
        try:
            check_device(self.device)
        except ValueError as error:
            raise ValueError(f"The 'device' parameter of {type(self).__name__}: {error}") from None
        _check_int(self, "batch_size", low=1, allow_none=True)

    def _output_dimension(self, n_samples, n_features: int) -> int:
        """k, with SparseRandomProjection's errors and warning for an unreduced dimension.

        ``n_samples`` is read only for "auto" (a dask array may not know it otherwise).
        """
        if self.n_components == "auto":
            n_samples = int(n_samples)
            k = int(johnson_lindenstrauss_min_dim(n_samples=n_samples, eps=self.eps))
            if k <= 0:
                raise ValueError(
                    f"eps={self.eps:f} and n_samples={n_samples} lead to a target dimension of {k} which is invalid"
                )
            if k > n_features:
                raise ValueError(
                    f"eps={self.eps:f} and n_samples={n_samples} lead to a target "
                    f"dimension of {k} which is larger than the original space with "
                    f"n_features={n_features}"
                )
            return k
        if self.n_components > n_features:
            # SparseRandomProjection's text verbatim (missing space included), so that warning
            # filters written for it match this one too.
            warnings.warn(
                f"The number of components is higher than the number of features: n_features < "
                f"n_components ({n_features} < {self.n_components}).The dimensionality of the "
                f"problem will not be reduced.",
                DataDimensionalityWarning,
                stacklevel=1,
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
            return [name for name in object.__dir__(self) if name != "components_" and hasattr(self, name)]

    def _scipy_matrix(self, dtype, *, sparray: bool | None = None):
        S = F.sparse_jl_matrix(
            self.n_features_in_, self.n_components_, seed=self.seed_, nnz=self.nnz_, dtype=torch.float64
        )
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
            X = _check_tensor(X, self, reset=False)
            return F.sparse_jl(X, self.n_components_, seed=self.seed_, nnz=self.nnz_)
        if _is_dask_array(X):
            return self._transform_dask(X)
        # Dense X skips sklearn's finiteness pass over X (a full read of the input, about a third
        # of the projection's time) and checks the 4x smaller output instead, where it is
        # computed: every column of S has nnz >= 1 nonzeros, so a NaN or inf anywhere in X
        # reaches the output. Only then is X itself checked, so the error is sklearn's standard
        # one. float16 X is not widened here but on the device, into a float32 result.
        X = validate_data(
            self, X, accept_sparse=["csr", "csc"], dtype=_DENSE_DTYPES, reset=False, ensure_all_finite=False
        )
        if sp.issparse(X):
            assert_all_finite(X, estimator_name=type(self).__name__, input_name="X")
            return self._transform_sparse(X)
        projected, all_finite = self._transform_dense(X)
        if not all_finite:
            assert_all_finite(X, estimator_name=type(self).__name__, input_name="X")
            raise ValueError(
                f"{type(self).__name__}: the projection of X overflowed {X.dtype} "
                f"although X is finite; pass float64 data"
            )
        return projected

    def _transform_sparse(self, X):
        S = self._scipy_matrix(X.dtype, sparray=isinstance(X, _SPARSE_ARRAY))
        projected = X @ S.T
        if self.dense_output:
            return projected.toarray() if sp.issparse(projected) else np.asarray(projected)
        return _as_configured_sparse(projected)

    def _transform_dense(self, X: np.ndarray) -> tuple[np.ndarray, bool]:
        device = resolve_device(self.device, gpu_worthwhile=X.size >= _GPU_MIN_ELEMENTS)
        return project_rows(
            X,
            self.n_components_,
            seed=self.seed_,
            nnz=self.nnz_,
            device=device,
            rows_per_chunk=self.batch_size,
            output_dtype=np.promote_types(X.dtype, np.float32),
        )

    def _transform_dask(self, X):
        _check_dask_array(X, self, reset=False)
        if X.dtype not in (np.float32, np.float64):
            if np.issubdtype(X.dtype, np.complexfloating):
                raise ValueError("Complex data not supported")
            X = X.astype(np.float64)
        # A name, resolved by each task on its own worker ('auto': that worker's GPU, if any).
        return map_row_blocks(
            X, self.n_components_, seed=self.seed_, nnz=self.nnz_, device=str(check_device(self.device))
        )

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
            coefficients = tensor_view(np.ascontiguousarray(X @ pinv_gram.astype(X.dtype)))
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
        return self._adjoint(tensor_view(X), X)

    def _checked_projected(self, X):
        """Validates an (n_samples, n_components_) input of the inverse maps."""
        if isinstance(X, torch.Tensor):
            X = _check_tensor(X, self, reset=None)
        else:
            X = check_array(X, accept_sparse=["csr", "csc"], dtype=[np.float64, np.float32])
        if X.shape[1] != self.n_components_:
            raise ValueError(
                f"X has {X.shape[1]} components, but {type(self).__name__} is "
                f"expecting {self.n_components_} components as input."
            )
        return X

    def _adjoint(self, y: torch.Tensor, original):
        back = F.sparse_jl_transpose(y, self.n_features_in_, seed=self.seed_, nnz=self.nnz_)
        return back if isinstance(original, torch.Tensor) else back.numpy()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = True
        return tags


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
        dropped = F.seeded_dropout(tensor_view(X), self.p, seed=self.seed_)
        return dropped.numpy()

    def transform(self, X):
        """Return X validated and unchanged (the inference pass)."""
        check_is_fitted(self)
        return validate_data(self, X, dtype=[np.float64, np.float32], reset=False)

    def _fit(self, X) -> np.ndarray:
        if isinstance(self.p, bool) or not isinstance(self.p, numbers.Real) or not 0 <= self.p <= 1:
            raise _parameter_error(self, "p", "a float in the range [0, 1]")
        _check_random_state(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        self.seed_ = seed_from_random_state(self.random_state)
        return X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
