"""The two test tiers: the fast one (``make test``, the default) and the thorough one (``-m slow``).

A grid of cases runs whole in the thorough tier; the fast tier runs the combinations that cover
each code path once, chosen where the interpreter makes the whole grid take minutes.
"""

from __future__ import annotations

import itertools

import pytest

SLOW = pytest.mark.slow


def _case_id(value) -> str:
    if isinstance(value, tuple):
        return "x".join(map(_case_id, value))
    return str(value).removeprefix("torch.")


def grid(axes: dict[str, list], fast: list[dict]) -> tuple[str, list]:
    """Arguments for ``pytest.mark.parametrize``: the cross product of ``axes``, in which a
    combination runs in the fast tier if it matches one of ``fast`` (each key given there equals
    the combination's value) and is marked slow otherwise.

    An axis whose name holds commas takes tuples, as in ``parametrize``.
    """
    names = list(axes)
    unknown = {key for case in fast for key in case} - set(names)
    assert not unknown, f"fast cases name axes the grid lacks: {sorted(unknown)}"
    params = []
    for combination in itertools.product(*axes.values()):
        values = dict(zip(names, combination))
        is_fast = any(all(values[key] == want for key, want in case.items()) for case in fast)
        flat = [v for name, value in values.items() for v in (value if "," in name else (value,))]
        params.append(pytest.param(*flat, marks=() if is_fast else SLOW, id="-".join(map(_case_id, flat))))
    assert any(not p.marks for p in params), "no combination of the grid runs in the fast tier"
    return ",".join(names), params
