"""Digits -> SparseJLProjection -> LogisticRegression in a scikit-learn Pipeline.

Run: python examples/sklearn_pipeline.py   (a few seconds on a laptop CPU)
"""

from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sjlt.sklearn import SparseJLProjection


def main() -> float:
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    # An int random_state is the projection's seed: the same matrix on every machine and device.
    model = make_pipeline(
        StandardScaler(), SparseJLProjection(n_components=32, random_state=0), LogisticRegression(max_iter=2000)
    )
    model.fit(X_train, y_train)
    accuracy = model.score(X_test, y_test)
    print(f"digits: {X.shape[1]} pixels -> 32 sparse JL components, test accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
