"""Three sites tune one model together: a support-vector classifier on scikit-learn's bundled
digits data set (no download), each site holding its own shard of it.

The parameters are typed (:data:`SPACE`): ``C`` and ``gamma`` on a log scale, the ``kernel``
a category, the polynomial kernel's ``degree`` an integer. A site's objective is the validation
accuracy of ``SVC(**params)`` trained on its own training shard and scored on its own
validation shard. Nothing but these accuracies leaves this module: the data stay at the site.
A fit is deterministic, so the runs declare it (``deterministic``): a site fits each parameter
set once, however often the algorithm comes back to it.

``accuracy(params, client_id)`` serves every site (fedxab passes the site's id); ``site0``,
``site1`` and ``site2`` are the same for one site each (``fedxab client --objective``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

import fedxab

SITES = 3
SPACE = {
    "C": fedxab.Float(1e-2, 1e3, log=True),
    "gamma": fedxab.Float(1e-5, 1e-1, log=True),
    "kernel": fedxab.Categorical(["rbf", "poly"]),
    "degree": fedxab.Int(2, 5),  # used by the polynomial kernel only
}


@functools.cache
def shard(client_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Site ``client_id``'s training and validation data: every third digit image from its
    offset, split 70/30 with a fixed seed."""
    digits = load_digits()
    X, y = digits.data[client_id::SITES] / 16.0, digits.target[client_id::SITES]
    return tuple(train_test_split(X, y, test_size=0.3, random_state=client_id, stratify=y))


def accuracy(params: dict[str, Any], client_id: int) -> float:
    """Validation accuracy of site ``client_id`` with ``params`` (C, gamma, kernel, degree)."""
    X_train, X_valid, y_train, y_valid = shard(client_id)
    model = SVC(**params).fit(X_train, y_train)
    return float(model.score(X_valid, y_valid))


def site0(params: dict[str, Any]) -> float:
    return accuracy(params, 0)


def site1(params: dict[str, Any]) -> float:
    return accuracy(params, 1)


def site2(params: dict[str, Any]) -> float:
    return accuracy(params, 2)
