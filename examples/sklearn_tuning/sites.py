"""Three sites tune one model together: an RBF support-vector classifier on scikit-learn's
bundled digits data set (no download), each site holding its own shard of it.

A point is ``(log10 C, log10 gamma)``; a site's objective is the validation accuracy of
``SVC(C, gamma)`` trained on its own training shard and scored on its own validation shard.
Nothing but these accuracies leaves this module: the data stay at the site.

``accuracy(x, client_id)`` serves every site (fedxab passes the site's id); ``site0``,
``site1`` and ``site2`` are the same for one site each (``fedxab client --objective``).
"""

from __future__ import annotations

import functools

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

SITES = 3
DOMAIN = [[-2.0, 3.0], [-5.0, -1.0]]  # log10 C, log10 gamma


@functools.cache
def shard(client_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Site ``client_id``'s training and validation data: every third digit image from its
    offset, split 70/30 with a fixed seed."""
    digits = load_digits()
    X, y = digits.data[client_id::SITES] / 16.0, digits.target[client_id::SITES]
    return tuple(train_test_split(X, y, test_size=0.3, random_state=client_id, stratify=y))


@functools.lru_cache(maxsize=4096)
def _accuracy(log_c: float, log_gamma: float, client_id: int) -> float:
    X_train, X_valid, y_train, y_valid = shard(client_id)
    model = SVC(C=10.0**log_c, gamma=10.0**log_gamma).fit(X_train, y_train)
    return float(model.score(X_valid, y_valid))


def accuracy(x: np.ndarray, client_id: int) -> float:
    """Validation accuracy of site ``client_id`` at ``x = (log10 C, log10 gamma)`` (cached: the
    algorithms evaluate the same points again)."""
    return _accuracy(float(x[0]), float(x[1]), client_id)


def site0(x: np.ndarray) -> float:
    return accuracy(x, 0)


def site1(x: np.ndarray) -> float:
    return accuracy(x, 1)


def site2(x: np.ndarray) -> float:
    return accuracy(x, 2)
