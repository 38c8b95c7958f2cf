"""sjlt.sklearn: scikit-learn's estimator contract, every input kind, integration, distortion."""

import pickle
import re
import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
import torch
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_digits
from sklearn.exceptions import DataDimensionalityWarning, NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.random_projection import SparseRandomProjection, johnson_lindenstrauss_min_dim
from sklearn.utils.estimator_checks import parametrize_with_checks

import sjlt.functional as F
from sjlt import reference, spec
from sjlt.metrics import distortion_percentile
from sjlt.sklearn import FeatureDropout, SparseJLProjection, seed_from_random_state

HAS_CUDA = torch.cuda.is_available()
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def np_rng(rng):
    """A numpy generator seeded from conftest's per-test torch generator."""
    return np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=rng)))


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)


# ------------------------------------------------------------------------------------------
# scikit-learn's estimator checks
# ------------------------------------------------------------------------------------------


def _expected_failed_checks(estimator):
    if isinstance(estimator, FeatureDropout):
        reason = (
            "FeatureDropout is dropout: fit_transform is the training pass (drops elements) "
            "and transform the inference pass (identity), like nn.Dropout in train/eval "
            "mode, so fit_transform(X) != fit(X).transform(X) by design"
        )
        return {"check_transformer_general": reason, "check_transformer_data_not_an_array": reason}
    return {}


# sklearn's own random projections are checked with n_components=2: its check data has 2-5 features.
@parametrize_with_checks(
    [
        SparseJLProjection(n_components=2),
        SparseJLProjection(n_components=3, nnz=1, dense_output=False, batch_size=4),
        FeatureDropout(p=0.3),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# ------------------------------------------------------------------------------------------
# random_state -> seed
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 12345, 2**32, 2**64 - 1, np.uint64(2**63 + 5), np.int32(7)])
def test_int_random_state_is_the_seed(seed):
    assert seed_from_random_state(seed) == int(seed)
    X = np.random.default_rng(1).standard_normal((5, 40))
    est = SparseJLProjection(6, random_state=seed).fit(X)
    assert est.seed_ == int(seed)
    expected = reference.sparse_jl_matrix(40, 6, seed=int(seed), nnz=6, dtype=torch.float64)
    np.testing.assert_array_equal(est.components_.toarray(), expected.to_dense().numpy())


def test_random_state_generators_draw_one_uint64():
    assert seed_from_random_state(np.random.RandomState(3)) == int(
        np.random.RandomState(3).randint(0, 2**64, dtype=np.uint64)
    )
    assert seed_from_random_state(np.random.default_rng(3)) == int(
        np.random.default_rng(3).integers(0, 2**64, dtype=np.uint64)
    )
    generator = np.random.RandomState(4)
    assert seed_from_random_state(generator) != seed_from_random_state(generator)  # it advances


def test_random_state_none_uses_numpy_global_state():
    np.random.seed(11)
    first = seed_from_random_state(None)
    np.random.seed(11)
    assert seed_from_random_state(None) == first
    assert seed_from_random_state(None) != first


@pytest.mark.parametrize("estimator_type", [SparseJLProjection, FeatureDropout])
@pytest.mark.parametrize(
    "bad, error", [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("0", TypeError), (True, TypeError)]
)
def test_bad_random_state_is_rejected(estimator_type, bad, error):
    X = np.random.default_rng(0).standard_normal((4, 10))
    estimator = estimator_type(random_state=bad)
    if isinstance(estimator, SparseJLProjection):
        estimator.set_params(n_components=2)
    with pytest.raises(error, match="random_state"):
        estimator.fit(X)


def test_seed_from_random_state_rejects_bad_values_directly():
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        seed_from_random_state(-3)
    with pytest.raises(TypeError, match="random_state must be a Python int"):
        seed_from_random_state(True)
    with pytest.raises(ValueError, match="cannot be used to seed"):
        seed_from_random_state("seed")


# ------------------------------------------------------------------------------------------
# fit
# ------------------------------------------------------------------------------------------


def test_auto_n_components_uses_sklearns_bound(np_rng):
    X = np_rng.standard_normal((40, 2000))
    est = SparseJLProjection(eps=0.5, random_state=0).fit(X)
    assert est.n_components_ == johnson_lindenstrauss_min_dim(40, eps=0.5)
    assert est.nnz_ == spec.default_nnz(est.n_components_) and est.n_features_in_ == 2000


# The bound for 40 samples at eps=0.5 is 177 > 100 features; for 1 sample it is 0.
@pytest.mark.parametrize("shape", [(40, 100), (1, 100)])
def test_auto_bound_out_of_range_raises_sklearns_error(np_rng, shape):
    X = np_rng.standard_normal(shape)
    with pytest.raises(ValueError) as sklearn_error:
        SparseRandomProjection(eps=0.5).fit(X)
    with pytest.raises(ValueError, match=re.escape(str(sklearn_error.value))):
        SparseJLProjection(eps=0.5).fit(X)


def test_more_components_than_features_warns_like_sklearn(np_rng):
    X = np_rng.standard_normal((10, 5))
    with pytest.warns(DataDimensionalityWarning) as sklearn_warning:
        SparseRandomProjection(n_components=8).fit(X)
    with pytest.warns(DataDimensionalityWarning, match=re.escape(str(sklearn_warning[0].message)).replace(r"\ ", " ")):
        est = SparseJLProjection(n_components=8, random_state=0).fit(X)
    assert est.transform(X).shape == (10, 8)


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"n_components": 0}, ValueError, "'n_components' parameter"),
        ({"n_components": "big"}, TypeError, "'n_components' parameter"),
        ({"eps": 0.0}, ValueError, "'eps' parameter"),
        ({"nnz": 0}, ValueError, "'nnz' parameter"),
        ({"dense_output": "yes"}, TypeError, "'dense_output' parameter"),
        ({"device": "tpu"}, ValueError, "'device' parameter"),
        ({"batch_size": 0}, ValueError, "'batch_size' parameter"),
    ],
)
def test_bad_parameters_are_rejected_in_fit(np_rng, params, error, match):
    est = SparseJLProjection(**params)  # stored verbatim, validated in fit
    assert all(getattr(est, key) == value for key, value in params.items())
    with pytest.raises(error, match=match):
        est.fit(np_rng.standard_normal((5, 20)))


def test_nnz_above_n_components_is_rejected(np_rng):
    with pytest.raises(ValueError, match=r"nnz must lie in \[1, out_features=4\]"):
        SparseJLProjection(4, nnz=5).fit(np_rng.standard_normal((5, 20)))


def test_non_cpu_cuda_torch_device_is_rejected(np_rng):
    with pytest.raises(ValueError, match="torch.device of type cpu or cuda"):
        SparseJLProjection(4, device=torch.device("meta")).fit(np_rng.standard_normal((5, 20)))


# ------------------------------------------------------------------------------------------
# components_, pickling, state size
# ------------------------------------------------------------------------------------------


def test_components_is_materialised_on_demand_and_never_stored(np_rng):
    X = np_rng.standard_normal((20, 300))
    est = SparseJLProjection(30, nnz=4, random_state=9)
    with pytest.raises(NotFittedError):
        est.components_  # noqa: B018
    est.fit(X)
    S = est.components_
    assert sp.isspmatrix_csr(S) and S.shape == (30, 300) and S.dtype == np.float64
    assert np.all(S.getnnz(axis=0) == 4)
    np.testing.assert_allclose(np.abs(S.data), 0.5)
    assert not any(isinstance(v, (np.ndarray, torch.Tensor)) or sp.issparse(v) for v in vars(est).values())
    with pytest.raises(AttributeError):
        est.components_ = S


def test_html_repr_does_not_build_the_matrix(np_rng, monkeypatch):
    est = SparseJLProjection(5, random_state=0).fit(np_rng.standard_normal((8, 30)))

    def fail(*args, **kwargs):
        raise AssertionError("displaying the estimator built S")

    monkeypatch.setattr(SparseJLProjection, "_scipy_matrix", fail)
    assert "SparseJLProjection" in est._repr_html_()
    assert "components_" not in dir(est) and hasattr(SparseJLProjection, "components_")


def test_pickled_fitted_estimator_is_tiny_and_equivalent(np_rng):
    X = np_rng.standard_normal((50, 4096)).astype(np.float32)
    est = SparseJLProjection(256, random_state=np_rng.integers(2**63)).fit(X)
    blob = pickle.dumps(est)
    assert len(blob) < 2048, len(blob)
    np.testing.assert_array_equal(pickle.loads(blob).transform(X), est.transform(X))


# ------------------------------------------------------------------------------------------
# transform: numpy, scipy.sparse, pandas
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.float32, np.float32),
        (np.float64, np.float64),
        (np.float16, np.float32),  # widened on the device, not in a host pass
        (np.int64, np.float64),
        (np.int32, np.float64),
    ],
)
def test_dense_transform_dtype_and_values(np_rng, dtype, expected):
    X = (np_rng.standard_normal((30, 200)) * 10).astype(dtype)
    est = SparseJLProjection(24, random_state=5).fit(X)
    Y = est.transform(X)
    assert isinstance(Y, np.ndarray) and Y.dtype == expected and Y.shape == (30, 24)
    rtol = 1e-5 if expected == np.float32 else 1e-12
    np.testing.assert_allclose(Y, X.astype(np.float64) @ est.components_.T.toarray(), rtol=rtol, atol=rtol * 10)


def test_batched_transform_equals_whole(np_rng):
    X = np_rng.standard_normal((37, 150)).astype(np.float32)
    whole = SparseJLProjection(16, random_state=2).fit(X).transform(X)
    batched = SparseJLProjection(16, random_state=2, batch_size=5).fit(X).transform(X)
    np.testing.assert_allclose(batched, whole, rtol=1e-6, atol=1e-6)


def test_strided_and_readonly_inputs(np_rng):
    X = np_rng.standard_normal((20, 60))
    est = SparseJLProjection(8, random_state=1).fit(X)
    expected = est.transform(X[::-1].copy())
    np.testing.assert_allclose(est.transform(X[::-1]), expected, rtol=1e-12)
    readonly = X.copy()
    readonly.flags.writeable = False
    np.testing.assert_allclose(est.transform(readonly), est.transform(X), rtol=1e-12)
    np.testing.assert_allclose(est.transform(np.asfortranarray(X)), est.transform(X), rtol=1e-12)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_input_is_projected_sparse(np_rng, fmt, dtype):
    X = sp.random(40, 500, density=0.02, format=fmt, dtype=dtype, random_state=np_rng)
    dense_est = SparseJLProjection(32, random_state=4).fit(X)
    Y = dense_est.transform(X)
    assert isinstance(Y, np.ndarray) and Y.dtype == dtype
    reference_Y = X.toarray().astype(np.float64) @ dense_est.components_.T.toarray()
    np.testing.assert_allclose(Y, reference_Y, rtol=1e-5, atol=1e-5)
    sparse_est = SparseJLProjection(32, random_state=4, dense_output=False).fit(X)
    Ys = sparse_est.transform(X)
    assert sp.issparse(Ys) and Ys.dtype == dtype
    np.testing.assert_allclose(Ys.toarray(), Y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dense_est.transform(X.toarray()), Y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interface", ["spmatrix", "sparray"])
def test_sparse_results_follow_sklearns_sparse_interface(np_rng, interface):
    if "sparse_interface" not in sklearn.get_config():
        pytest.skip("scikit-learn < 1.9 has no sparse_interface option")
    for make in (sp.csr_matrix, sp.csr_array):
        X = make(sp.random(20, 300, density=0.05, random_state=np_rng))
        with sklearn.config_context(sparse_interface=interface):
            ours = SparseJLProjection(8, random_state=0, dense_output=False).fit(X)
            theirs = SparseRandomProjection(8, random_state=0, dense_output=False).fit(X)
            assert type(ours.transform(X)) is type(theirs.transform(X))
            assert type(ours.components_) is type(theirs.components_)


def test_pandas_feature_names_and_set_output(np_rng):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(np_rng.standard_normal((20, 50)), columns=[f"pixel{i}" for i in range(50)])
    est = SparseJLProjection(7, random_state=0).fit(X)
    np.testing.assert_array_equal(est.feature_names_in_, X.columns)
    np.testing.assert_array_equal(est.get_feature_names_out(), [f"sparsejlprojection{i}" for i in range(7)])
    out = est.set_output(transform="pandas").transform(X)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == list(est.get_feature_names_out())
    assert list(out.index) == list(X.index)


def test_pandas_output_works_with_auto_n_components(np_rng):
    """scikit-learn's own random projections fail here (scikit-learn issue #34993)."""
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(np_rng.standard_normal((30, 2000)))
    X.columns = [f"f{i}" for i in range(2000)]
    est = SparseJLProjection(eps=0.5, random_state=0).set_output(transform="pandas")
    out = est.fit_transform(X)
    k = johnson_lindenstrauss_min_dim(30, eps=0.5)
    assert isinstance(out, pd.DataFrame) and out.shape == (30, k)
    assert list(out.columns) == [f"sparsejlprojection{i}" for i in range(k)]
    assert len(est.get_feature_names_out()) == k


# ------------------------------------------------------------------------------------------
# Input checks: scikit-learn's messages
# ------------------------------------------------------------------------------------------


def _fitted(n_features=10):
    X = np.random.default_rng(0).standard_normal((6, n_features))
    return SparseJLProjection(4, random_state=0).fit(X), X


@pytest.mark.parametrize("to_input", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), "Input X contains NaN"),
        (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 3, np.inf, X), "Input X contains infinity"),
        (lambda X: X + 1j, "Complex data not supported"),
        (lambda X: X[:0], r"Found array with 0 sample\(s\)"),
        (lambda X: X[:, :-1], "X has 9 features, but SparseJLProjection is expecting 10 features as input"),
        (lambda X: X[0], "Expected 2D array"),
    ],
)
def test_bad_input_gets_sklearns_error(corrupt, match, to_input):
    est, X = _fitted()
    with pytest.raises(ValueError, match=match):
        est.transform(to_input(corrupt(X)))


def test_sparse_torch_tensor_is_rejected():
    est, X = _fitted()
    with pytest.raises(TypeError, match="dense torch tensors"):
        est.transform(torch.from_numpy(X).to_sparse())


def test_unfitted_transform_raises():
    with pytest.raises(NotFittedError):
        SparseJLProjection().transform(np.ones((3, 4)))


# ------------------------------------------------------------------------------------------
# torch tensors, devices, dask
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_torch_tensor_in_torch_tensor_out(rng, dtype):
    X = torch.randn(25, 120, generator=rng)
    est = SparseJLProjection(16, random_state=8).fit(X.numpy())
    Y = est.transform(X.to(dtype))
    assert isinstance(Y, torch.Tensor) and Y.dtype == dtype and Y.device == X.device
    tolerance = 5e-2 if dtype == torch.bfloat16 else 1e-5
    np.testing.assert_allclose(Y.double().numpy(), est.transform(X.double().numpy()), rtol=tolerance, atol=tolerance)
    assert torch.equal(Y, F.sparse_jl(X.to(dtype), 16, seed=8))


def test_fit_on_tensor_reads_shape(rng):
    X = torch.randn(12, 40, generator=rng)
    est = SparseJLProjection(5, random_state=3).fit(X)
    assert est.n_features_in_ == 40 and not hasattr(est, "feature_names_in_")
    assert torch.is_tensor(est.transform(X)) and est.transform(X).shape == (12, 5)


def test_integer_tensor_becomes_float64(rng):
    X = torch.randint(-5, 5, (8, 30), generator=rng)
    est = SparseJLProjection(6, random_state=3).fit(X)
    assert est.transform(X).dtype == torch.float64


@pytest.mark.skipif(HAS_CUDA, reason="checks the error raised when no GPU is present")
def test_cuda_device_without_gpu_raises(np_rng):
    est = SparseJLProjection(4, device="cuda").fit(np_rng.standard_normal((5, 20)))
    with pytest.raises(RuntimeError, match=r"torch.cuda.is_available\(\) is False"):
        est.transform(np_rng.standard_normal((5, 20)))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gpu_pipeline_matches_cpu(np_rng, dtype):
    X = np_rng.standard_normal((1000, 777)).astype(dtype)
    cpu = SparseJLProjection(64, random_state=5, device="cpu").fit(X).transform(X)
    for batch_size in (None, 97, 1000):
        gpu = SparseJLProjection(64, random_state=5, device="cuda", batch_size=batch_size).fit(X).transform(X)
        assert isinstance(gpu, np.ndarray) and gpu.dtype == np.promote_types(dtype, np.float32)
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)
    X[500, 3] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        SparseJLProjection(64, random_state=5, device="cuda", batch_size=97).fit(X[:2]).transform(X)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_auto_device_large_input_and_cuda_tensors(np_rng):
    X = np_rng.standard_normal((4200, 1024)).astype(np.float32)  # above the 2**22-element threshold
    est = SparseJLProjection(128, random_state=6).fit(X)
    np.testing.assert_allclose(est.transform(X), est.set_params(device="cpu").transform(X), rtol=1e-4, atol=1e-4)
    Y = est.transform(torch.from_numpy(X).cuda())
    assert Y.is_cuda
    np.testing.assert_allclose(Y.cpu().numpy(), est.transform(X), rtol=1e-4, atol=1e-4)


def test_dask_array_is_projected_lazily(np_rng):
    da = pytest.importorskip("dask.array")
    X = np_rng.standard_normal((90, 64)).astype(np.float32)
    lazy = da.from_array(X, chunks=(25, 64))
    est = SparseJLProjection(12, random_state=7).fit(lazy)  # reads the shape only
    assert est.n_features_in_ == 64
    Y = est.transform(lazy)
    assert isinstance(Y, da.Array) and Y.shape == (90, 12)
    np.testing.assert_allclose(Y.compute(), est.transform(X), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="X has 63 features"):
        est.transform(lazy[:, :63])
    with pytest.raises(ValueError, match="Complex data not supported"):
        est.transform(lazy.astype(np.complex64))


def test_dask_fit_needs_known_sizes(np_rng):
    da = pytest.importorskip("dask.array")
    lazy = da.from_array(np_rng.standard_normal((40, 2000)), chunks=(10, 2000))
    unknown = lazy[lazy[:, 0] > -10]  # boolean indexing leaves the row count unknown
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        SparseJLProjection(eps=0.5).fit(unknown)
    unknown_columns = lazy.map_blocks(lambda block: block, chunks=(lazy.chunks[0], (np.nan,)))
    with pytest.raises(ValueError, match="number of columns"):
        SparseJLProjection(4).fit(unknown_columns)


# ------------------------------------------------------------------------------------------
# inverse_transform and adjoint_transform
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k, d", [(12, 40), (40, 25)], ids=["k<d", "k>d"])
def test_inverse_transform_is_the_pseudo_inverse(np_rng, k, d):
    X = np_rng.standard_normal((15, d))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataDimensionalityWarning)
        # nnz=8, not the default (2 at k=40): with few nonzeros two columns can coincide and S
        # lose the column rank that Z == X needs.
        est = SparseJLProjection(k, nnz=8, random_state=np_rng.integers(2**63)).fit(X)
    S = est.components_.toarray()
    assert np.linalg.matrix_rank(S) == min(k, d)
    Y = est.transform(X)
    Z = est.inverse_transform(Y)
    np.testing.assert_allclose(Z, Y @ np.linalg.pinv(S).T, rtol=1e-9, atol=1e-9)
    if k < d:
        np.testing.assert_allclose(est.transform(Z), Y, rtol=1e-9, atol=1e-9)
    else:
        np.testing.assert_allclose(Z, X, rtol=1e-9, atol=1e-9)  # S has full column rank


def test_inverse_transform_dtypes_and_containers(np_rng, rng):
    X = np_rng.standard_normal((10, 60))
    est = SparseJLProjection(9, random_state=1).fit(X)
    Y64 = est.transform(X)
    expected = est.inverse_transform(Y64)
    Z32 = est.inverse_transform(Y64.astype(np.float32))
    assert Z32.dtype == np.float32
    np.testing.assert_allclose(Z32, expected, rtol=1e-4, atol=1e-4)
    # atol on the scale of Z: an entry near zero is a cancellation, beyond rtol's reach
    atol = 1e-12 * np.abs(expected).max()
    np.testing.assert_allclose(est.inverse_transform(sp.csr_matrix(Y64)), expected, rtol=1e-10, atol=atol)
    Zt = est.inverse_transform(torch.from_numpy(Y64))
    assert torch.is_tensor(Zt)
    np.testing.assert_allclose(Zt.numpy(), expected, rtol=1e-10, atol=atol)
    with pytest.raises(ValueError, match="X has 8 components, but SparseJLProjection is expecting 9"):
        est.inverse_transform(Y64[:, :8])


def _assert_is_product(got, Y, S):
    """got equals Y @ S to float64 rounding: each entry within 1e-13 of the sum of its terms'
    magnitudes (an entry where terms cancel has a larger relative error than rtol can bound)."""
    error, bound = np.abs(got - Y @ S), 1e-13 * (np.abs(Y) @ np.abs(S))
    assert np.all(error <= bound), f"worst error / bound: {np.max(error / np.maximum(bound, 1e-300))}"


def test_adjoint_transform_is_the_transpose_not_an_inverse(np_rng):
    X = np_rng.standard_normal((10, 60))
    est = SparseJLProjection(9, random_state=1).fit(X)
    Y = np_rng.standard_normal((4, 9))
    S = est.components_.toarray()
    _assert_is_product(est.adjoint_transform(Y), Y, S)
    _assert_is_product(est.adjoint_transform(sp.csc_matrix(Y)), Y, S)
    assert sp.issparse(est.set_params(dense_output=False).adjoint_transform(sp.csr_matrix(Y)))
    _assert_is_product(est.adjoint_transform(torch.from_numpy(Y)).numpy(), Y, S)
    assert not np.allclose(est.adjoint_transform(est.transform(X)), X, atol=0.1)


# ------------------------------------------------------------------------------------------
# Integration on digits
# ------------------------------------------------------------------------------------------


def test_pipeline_on_digits(digits):
    X, y = digits
    model = make_pipeline(StandardScaler(), SparseJLProjection(32, random_state=0), LogisticRegression(max_iter=2000))
    model.fit(X[:1200], y[:1200])
    assert model.score(X[1200:], y[1200:]) > 0.85


def test_column_transformer_on_digits(digits):
    X, _ = digits
    columns = ColumnTransformer(
        [
            ("top", SparseJLProjection(8, random_state=3), list(range(32))),
            ("bottom", "passthrough", list(range(32, 64))),
        ]
    )
    out = columns.fit_transform(X)
    assert out.shape == (X.shape[0], 40)
    alone = SparseJLProjection(8, random_state=3).fit(X[:, :32])
    np.testing.assert_allclose(out[:, :8], alone.transform(X[:, :32]), rtol=1e-12)
    np.testing.assert_array_equal(out[:, 8:], X[:, 32:])


def test_grid_search_over_n_components_and_nnz(digits):
    X, y = digits
    model = Pipeline(
        [
            ("scale", StandardScaler()),
            ("project", SparseJLProjection(random_state=0)),
            ("classify", LogisticRegression(max_iter=2000)),
        ]
    )
    search = GridSearchCV(model, {"project__n_components": [8, 24], "project__nnz": [1, 4]}, cv=2)
    search.fit(X[:600], y[:600])
    assert len(search.cv_results_["params"]) == 4
    assert search.best_params_["project__n_components"] == 24  # more components, better accuracy
    assert search.best_estimator_.named_steps["project"].n_components_ == 24


def test_clone_and_pickle_on_digits(digits):
    X, _ = digits
    fitted = SparseJLProjection(16, nnz=2, random_state=2**63 + 1).fit(X)
    fresh = clone(fitted)
    assert fresh.get_params() == fitted.get_params() and not hasattr(fresh, "seed_")
    np.testing.assert_array_equal(fresh.fit(X).transform(X), fitted.transform(X))
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.transform(X), fitted.transform(X))


def test_example_script_runs(capsys):
    runpy.run_path(str(REPO / "examples" / "sklearn_pipeline.py"), run_name="__main__")
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", capsys.readouterr().out).group(1))
    assert accuracy > 0.85


# ------------------------------------------------------------------------------------------
# Distortion against SparseRandomProjection
# ------------------------------------------------------------------------------------------


def _dataset(kind, generator, n=100, d=2000):
    if kind == "dense":
        return generator.standard_normal((n, d)), 64
    if kind == "digits":
        X, _ = load_digits(return_X_y=True)
        return X[generator.choice(len(X), 150, replace=False)], 32
    X = np.zeros((n, d))
    for row in X:
        if kind == "very sparse":  # 4 nonzeros per row
            row[generator.choice(d, 4, replace=False)] = generator.standard_normal(4)
        else:  # "window": all mass in 16 contiguous coordinates
            start = generator.integers(0, d - 16)
            row[start : start + 16] = generator.standard_normal(16)
    return X, 64


# Margins were set from 20 independent repetitions of the dense case (ratio 0.94-1.05).
@pytest.mark.parametrize("kind, max_ratio", [("dense", 1.10), ("digits", 1.10), ("very sparse", 0.5), ("window", 1.0)])
def test_distortion_no_worse_than_sparse_random_projection(kind, max_ratio):
    generator = np.random.default_rng(20240601)
    X, k = _dataset(kind, generator)
    seeds = range(10)
    ours = np.mean(
        [distortion_percentile(X, SparseJLProjection(k, random_state=s).fit_transform(X), 99) for s in seeds]
    )
    theirs = np.mean(
        [
            distortion_percentile(X, SparseRandomProjection(k, random_state=s, dense_output=True).fit_transform(X), 99)
            for s in seeds
        ]
    )
    print(
        f"\n{kind}: n={X.shape[0]} d={X.shape[1]} k={k}, p99 distortion over 10 seeds: "
        f"SparseJLProjection {ours:.3f}, SparseRandomProjection {theirs:.3f}, ratio {ours / theirs:.2f}"
    )
    assert ours <= theirs * max_ratio


# ------------------------------------------------------------------------------------------
# FeatureDropout
# ------------------------------------------------------------------------------------------


def test_dropout_fit_transform_is_seeded_dropout(np_rng):
    X = np_rng.standard_normal((40, 30)).astype(np.float32)
    est = FeatureDropout(p=0.25, random_state=77)
    dropped = est.fit_transform(X)
    assert dropped.dtype == np.float32 and est.seed_ == 77
    expected = F.seeded_dropout(torch.from_numpy(X), 0.25, seed=77).numpy()
    np.testing.assert_array_equal(dropped, expected)
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], X[kept] / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9


def test_dropout_mask_is_reproducible_for_an_int_random_state(np_rng):
    X = np_rng.standard_normal((50, 20))
    first = FeatureDropout(p=0.5, random_state=3).fit_transform(X)
    again = FeatureDropout(p=0.5, random_state=3).fit_transform(X)
    np.testing.assert_array_equal(first, again)
    # The mask depends on (seed, position), not on the values:
    other_values = FeatureDropout(p=0.5, random_state=3).fit_transform(X + 1.0)
    np.testing.assert_array_equal(first == 0, other_values == 0)
    assert not np.array_equal(first, FeatureDropout(p=0.5, random_state=4).fit_transform(X))


def test_dropout_random_state_instance_draws_new_masks(np_rng):
    X = np_rng.standard_normal((50, 20))
    est = FeatureDropout(p=0.5, random_state=np.random.RandomState(0))
    assert not np.array_equal(est.fit_transform(X), est.fit_transform(X))


def test_dropout_transform_is_identity(np_rng):
    X = np_rng.standard_normal((10, 6))
    est = FeatureDropout(p=0.9, random_state=0).fit(X)
    np.testing.assert_array_equal(est.transform(X), X)
    with pytest.raises(ValueError, match="X has 5 features, but FeatureDropout is expecting 6"):
        est.transform(X[:, :5])


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_edge_probabilities(np_rng, p):
    X = np_rng.standard_normal((10, 6))
    out = FeatureDropout(p=p, random_state=0).fit_transform(X)
    np.testing.assert_array_equal(out, X if p == 0 else np.zeros_like(X))


@pytest.mark.parametrize("p", [-0.1, 1.5, "half"])
def test_dropout_bad_p_is_rejected(np_rng, p):
    with pytest.raises((TypeError, ValueError), match="'p' parameter of FeatureDropout"):
        FeatureDropout(p=p).fit(np_rng.standard_normal((4, 3)))


def test_dropout_in_a_pipeline_trains_on_dropped_data_and_predicts_on_clean(np_rng):
    X = np_rng.standard_normal((200, 8)) + 3.0
    model = make_pipeline(FeatureDropout(p=0.5, random_state=12), StandardScaler()).fit(X)
    dropped = FeatureDropout(p=0.5, random_state=12).fit_transform(X)
    np.testing.assert_allclose(model.named_steps["standardscaler"].mean_, dropped.mean(axis=0))
    np.testing.assert_allclose(model.transform(X), model.named_steps["standardscaler"].transform(X))


def test_dropout_pandas_output_keeps_names(np_rng):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(np_rng.standard_normal((10, 3)), columns=["a", "b", "c"])
    out = FeatureDropout(p=0.5, random_state=1).set_output(transform="pandas").fit_transform(X)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["a", "b", "c"]


def test_finite_input_whose_projection_overflows_gets_its_own_error():
    """The finiteness check runs on the output; a finite X that overflows float32 is not called NaN."""
    X = np.full((4, 64), 3e38, dtype=np.float32)
    estimator = SparseJLProjection(n_components=8, random_state=0).fit(X)
    with pytest.raises(ValueError, match="overflowed float32 although X is finite"):
        estimator.transform(X)
    assert np.isfinite(estimator.transform(X.astype(np.float64))).all()
