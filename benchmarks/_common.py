"""Shared pieces of the benchmarks: objective, noise stream, driver loop, memory probes.

This module imports only numpy and the standard library, so that a fresh subprocess that measures
memory can import it without pulling in rich, PyXAB or anything else that would inflate its RSS.

Every optimizer in a benchmark is driven by :func:`drive`, the one loop for all of them::

    x_t = ask(t)                       # the optimizer's point for round t (1-based)
    f_t = objective_at(x_t)            # noise-free value, one shared function
    r_t = f_t + noise[t - 1]           # noise pre-drawn from numpy.random.default_rng(seed)
    tell(t, x_t, r_t)                  # the optimizer's update
    regret += f_star - f_t             # cumulative (pseudo-)regret

so two optimizers given the same seed see exactly the same noise sequence, evaluate the objective
with exactly the same code, and differ only in ``ask``/``tell``.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------
# Garland on [0, 1]: f(x) = x (1 - x) (4 - sqrt|sin 60x|), the formula of PyXAB's ``Garland.f``.
# Its global maximiser is the cusp x* = pi/6 (sin 60x* = sin 10 pi = 0), where f = 4 x* (1 - x*).

GARLAND_DOMAIN: list[list[float]] = [[0.0, 1.0]]
GARLAND_X_STAR: float = math.pi / 6.0
GARLAND_F_STAR: float = 4.0 * GARLAND_X_STAR * (1.0 - GARLAND_X_STAR)


def garland(X: np.ndarray) -> np.ndarray:
    """Garland, vectorized: ``X`` of shape ``(n, 1)`` -> values of shape ``(n,)``."""
    x = np.asarray(X, dtype=float)[:, 0]
    return x * (1.0 - x) * (4.0 - np.sqrt(np.abs(np.sin(60.0 * x))))


def garland_at(point: Any) -> float:
    """Garland at a single point (an array or a list of one coordinate), in scalar arithmetic.

    The formula of :func:`garland` with ``math`` in place of numpy, about ten times cheaper on one
    point. The two must agree to within one unit in the last place: :func:`check_garland_scalar`
    checks it on the points the benchmarks pull (on the reference machine of the README they are
    equal to the last bit on every point checked).
    """
    x = float(point[0])
    return x * (1.0 - x) * (4.0 - math.sqrt(abs(math.sin(60.0 * x))))


def check_garland_scalar(depth: int = 16, draws: int = 100_000) -> None:
    """Check that :func:`garland_at` is :func:`garland` within one ulp at every cell centre of the
    dyadic partition of [0, 1] to ``depth`` (the points HCT pulls) and at ``draws`` uniform points.

    Raises ``AssertionError`` naming the worst point otherwise.
    """
    centres = [(2 * i + 1) / 2 ** (h + 1) for h in range(depth + 1) for i in range(2**h)]
    xs = np.concatenate([centres, np.random.default_rng(0).uniform(0.0, 1.0, draws)])
    vectorized = garland(xs.reshape(-1, 1))
    scalar = np.array([garland_at((x,)) for x in xs.tolist()])
    excess = np.abs(scalar - vectorized) / np.spacing(np.abs(vectorized))
    worst = int(np.argmax(excess))
    assert excess[worst] <= 1.0, (float(xs[worst]), float(scalar[worst]), float(vectorized[worst]))


def check_garland_optimum(grid_size: int = 2_000_001) -> float:
    """Sanity check of ``GARLAND_F_STAR``: no grid point exceeds it and x* attains it.

    Returns the grid maximum. Raises ``AssertionError`` if f* is not the maximum.
    """
    grid = np.linspace(0.0, 1.0, grid_size).reshape(-1, 1)
    grid_max = float(garland(grid).max())
    assert grid_max <= GARLAND_F_STAR + 1e-12, (grid_max, GARLAND_F_STAR)
    # In floating point sin(60 x*) is ~1e-15 rather than 0, and its square root ~4e-8.
    assert abs(garland_at([GARLAND_X_STAR]) - GARLAND_F_STAR) < 1e-7
    return grid_max


# --------------------------------------------------------------------------------------------
# Noise and driver


def uniform_noise(seed: int, budget: int, half_width: float = 0.1) -> np.ndarray:
    """The noise of every round, U(-half_width, half_width), from ``default_rng(seed)``.

    Drawn once before a run (outside the timed loop) and handed to every optimizer unchanged.
    """
    return np.random.default_rng(seed).uniform(-half_width, half_width, size=budget)


AskFn = Callable[[int], Any]
TellFn = Callable[[int, Any, float], None]


def drive(
    ask: AskFn,
    tell: TellFn,
    budget: int,
    noise: np.ndarray,
    *,
    objective_at: Callable[[Any], float] = garland_at,
    f_star: float = GARLAND_F_STAR,
    on_chunk: Callable[[int], None] | None = None,
    chunk: int = 1000,
) -> tuple[float, float]:
    """Run ``budget`` rounds of ask -> evaluate -> tell; return ``(wall_seconds, cum_regret)``.

    The wall time (``time.perf_counter``) covers the whole loop. ``on_chunk(n)`` is called after
    every ``chunk`` rounds (for a progress bar); it is the same for every optimizer.
    """
    if len(noise) < budget:
        raise ValueError(f"noise has {len(noise)} values, the budget is {budget}")
    regret = 0.0
    t = 0
    start = time.perf_counter()
    while t < budget:
        stop = min(t + chunk, budget)
        for s in range(t, stop):
            x = ask(s + 1)
            f = objective_at(x)
            tell(s + 1, x, f + float(noise[s]))
            regret += f_star - f
        if on_chunk is not None:
            on_chunk(stop - t)
        t = stop
    wall = time.perf_counter() - start
    return wall, regret


def ask_tell_adapters(opt: Any) -> tuple[AskFn, TellFn]:
    """:func:`drive` callbacks for an optimizer with fedxab's ``ask()`` / ``tell(x, reward)``."""
    return (lambda t: opt.ask()), (lambda t, x, r: opt.tell(x, r))


def pyxab_adapters(algo: Any) -> tuple[AskFn, TellFn]:
    """:func:`drive` callbacks for a PyXAB algorithm: ``pull(t)`` / ``receive_reward(t, r)``."""
    return (lambda t: algo.pull(t)), (lambda t, x, r: algo.receive_reward(t, r))


# --------------------------------------------------------------------------------------------
# Memory


def peak_rss_kib() -> int:
    """This process's peak resident set size so far (``getrusage(RUSAGE_SELF).ru_maxrss``).

    On Linux ``ru_maxrss`` is in KiB; on macOS it is in bytes, converted here to KiB.
    """
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def kib_to_mb(kib: float) -> float:
    """KiB -> MB (10^6 bytes)."""
    return kib * 1024.0 / 1e6


# The probe process. ``ru_maxrss`` of a process started by fork + exec inherits the high-water
# RSS of the process that spawned it (Linux keeps the pre-exec peak), which here would be the
# calling benchmark's own peak. So the fresh interpreter forks once before importing anything (it
# holds ~10 MB at that point) and the measurement runs in the forked process, whose peak-RSS
# record starts from that small interpreter.
_FRESH_PROCESS = """
import os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    status = 1
    try:
        import importlib, json
        sys.path.insert(0, sys.argv[1])
        probe = getattr(importlib.import_module(sys.argv[2]), sys.argv[3])
        os.write(w, json.dumps(probe(*json.loads(sys.argv[4]))).encode())
        status = 0
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(status)
os.close(w)
chunks = []
while chunk := os.read(r, 65536):
    chunks.append(chunk)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code == 0:
    print("PROBE-RESULT " + b"".join(chunks).decode())
sys.exit(code)
"""


def run_in_fresh_process(module: str, function: str, *args: object) -> dict:
    """``module.function(*args)`` (a benchmarks/ module) in a fresh, forked interpreter.

    Returns the function's JSON-serialisable result; peak RSS read inside it is the probe's own.
    """
    import json
    import subprocess
    import sys

    bench_dir = Path(__file__).resolve().parent
    cmd = [
        sys.executable,
        "-c",
        _FRESH_PROCESS,
        str(bench_dir),
        module,
        function,
        json.dumps(list(args)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=bench_dir.parent, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{module}.{function} failed (exit {proc.returncode}):\n{proc.stderr}")
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE-RESULT "):
            return json.loads(line[len("PROBE-RESULT ") :])
    raise RuntimeError(f"{module}.{function} printed no result:\n{proc.stdout}\n{proc.stderr}")
