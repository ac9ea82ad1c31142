"""fedxab's Python API: federate your own functions, serve a job, host clients, ask and tell.

Every entry point takes a :class:`~fedxab.config.Config` (from a TOML file with
:func:`~fedxab.config.load_config`, or built in code with :func:`make_config`) and runs it on a
transport named by a URL: ``inprocess://`` (no broker, the fastest), ``memory://`` (the embedded
broker: server and client agents in this process) or ``kafka://HOST:PORT`` (parties in separate
processes or machines). The results are the same on every transport.

- :func:`federate`: the whole federation in this process, on the clients' own callables;
- :func:`serve`: the server of a job on a broker; it never needs the clients' objectives;
- :func:`host_clients`: some clients of a job on a broker, each with its own callable;
- :class:`AskTellClient`: one client whose evaluations happen elsewhere, driven by
  ``x = client.ask()`` ... ``client.tell(x, y)``, like Optuna's ask/tell.

A user's objective is a callable on one point (a 1-D float array; ``vectorized=True``: on an
(n, d) batch), or on named typed parameters (``space=``: a dict, or an Optuna-style trial),
returning a finite real number, to maximise or (``direction="minimize"``) minimise.
Pass one callable per client, or one callable for all; a callable with a ``client_id``
parameter is given each client's id.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedxab.config import Config, config_from_dict
from fedxab.errors import ConfigError, FedxabError
from fedxab.objectives.user import IN_CODE
from fedxab.results import RunResults
from fedxab.run.assembly import Functions
from fedxab.run.outcome import ClientOutcome
from fedxab.space import as_space

__all__ = ["AskTellClient", "federate", "host_clients", "make_config", "serve"]


def make_config(
    domain: Sequence[Sequence[float]] | np.ndarray | None = None,
    *,
    clients: int,
    budget: int,
    space: Any = None,
    algorithm: str = "auto",
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    repeats: int = 1,
    direction: str = "maximize",
    vectorized: bool = False,
    deterministic: bool = False,
    style: str = "auto",
    kwargs: Mapping[str, Any] | None = None,
    function: str = IN_CODE,
    sections: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """The config of a federated job on a user's objective: ``clients`` clients, each with
    ``budget`` evaluations on ``domain`` (``[lower, upper]`` per dimension) or on the typed
    parameters of ``space`` (a :class:`~fedxab.space.SearchSpace`, or a dict of
    ``fedxab.Float``/``Int``/``Categorical`` or Optuna distributions), optimised with
    ``algorithm`` and its ``params`` (``"auto"``, the default: chosen from the budget, the
    dimension, the parameters' types, the number of clients and ``[privacy]``, see
    :func:`~fedxab.algorithms.auto.choose_algorithm`). ``deterministic``: each distinct point is
    evaluated once per client; ``style``: how a function over a space is called ("auto",
    "params", "trial"); ``kwargs``: keyword arguments of every call. ``function`` names the
    objective for client processes (``package.module:function``); the default says it is passed
    in code. ``sections`` adds further config sections (``{"privacy": {...}, "agents":
    {...}}``).
    Every value is checked here, with errors naming the config field."""
    objective: dict[str, Any] = {
        "function": function,
        "direction": direction,
        "vectorized": vectorized,
        "deterministic": deterministic,
        "style": style,
        "kwargs": dict(kwargs or {}),
    }
    if domain is not None:
        objective["domain"] = np.asarray(domain, dtype=float).tolist()
    data: dict[str, Any] = {
        "run": {"seed": seed, "repeats": repeats, "budget": budget},
        "objective": objective,
        "algorithm": {"name": algorithm, **dict(params or {})},
        "federation": {"clients": clients},
    }
    if space is not None:
        data["space"] = as_space(space).to_dict()
    for name, table in (sections or {}).items():
        data[name] = {**data.get(name, {}), **dict(table)}
    return config_from_dict(data)


def _clients_of(objectives: Functions, clients: int | None) -> int:
    if callable(objectives):
        if clients is None:
            raise ConfigError(
                "federation.clients",
                "one callable for every client: say how many clients with clients=M",
            )
        return clients
    n = len(objectives)
    if clients is not None and clients != n:
        raise ConfigError(
            "federation.clients", f"clients={clients} but {n} callables were given (one each)"
        )
    return n


def federate(
    objectives: Functions,
    domain: Sequence[Sequence[float]] | np.ndarray | None = None,
    *,
    budget: int,
    space: Any = None,
    clients: int | None = None,
    algorithm: str = "auto",
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    repeats: int = 1,
    direction: str = "maximize",
    vectorized: bool = False,
    deterministic: bool = False,
    style: str = "auto",
    kwargs: Mapping[str, Any] | None = None,
    broker: str = "inprocess://",
    sections: Mapping[str, Mapping[str, Any]] | None = None,
    resume: RunResults | None = None,
) -> RunResults:
    """Federate the clients' own ``objectives`` with ``algorithm``, every party in this process.

    ``objectives``: one callable per client, or one for all (then ``clients`` is required).
    The search: a box ``domain`` (the function gets a 1-D array) or typed parameters ``space``
    (``{"lr": fedxab.Float(1e-4, 1e-1, log=True), ...}``: the function gets the parameters as
    a dict, or, for ``def objective(trial)``, an Optuna-style trial; ``style`` forces one).
    ``deterministic``: the function gives the same value for the same parameters, so each
    client evaluates each distinct parameter set once. ``broker``: ``inprocess://`` (default),
    ``memory://`` or ``kafka://HOST:PORT``. Returns the results of ``repeats`` runs (seeds
    ``seed, seed + 1, ...``): per run the server's recommendation and, per client, what it
    observed (``runs[k].clients``; with a space also by name, ``runs[k].best_params``).

    ``resume``: the results of an earlier call of the same job with a smaller ``budget``: each
    of its runs continues to ``budget`` (as ``study.optimize`` called again does), its
    evaluations answered from its trials, not made again (:mod:`fedxab.run.continuation`:
    which algorithms continue, and how). In process (``memory://`` too); on Kafka the server
    and the clients continue with ``fedxab server --resume`` and ``fedxab client --resume``."""
    config = make_config(
        domain,
        clients=_clients_of(objectives, clients),
        budget=budget,
        space=space,
        algorithm=algorithm,
        params=params,
        seed=seed,
        repeats=repeats,
        direction=direction,
        vectorized=vectorized,
        deterministic=deterministic,
        style=style,
        kwargs=kwargs,
        sections={**(sections or {}), "broker": {"url": broker}},
    )
    if resume is None:
        return run_job(config, functions=objectives)
    from fedxab.run.continuation import continuations_from_results, in_process

    config, continuations = continuations_from_results(resume, config)
    return run_job(in_process(config), functions=objectives, continuations=continuations)


def run_job(config: Config, *, functions: Functions | None = None, **options: Any) -> RunResults:
    """Every run of a federated ``config`` in this process, on its ``[broker] url``: the
    in-process runner for ``inprocess://``, else a server agent and client agents on the
    broker. ``functions`` replace the config's objectives; ``options`` go to the runner
    (``progress``, ``on_run_start``, ``metrics``, and on a broker ``hosts``)."""
    from fedxab.agents.distributed import run_on_broker_config
    from fedxab.agents.federation import run_federated_config
    from fedxab.broker.base import Broker
    from fedxab.broker.factory import make_broker

    if config.broker is None:
        raise ConfigError("algorithm.name", f"{config.algorithm.name!r} is not federated")
    url, settings = config.broker.url, config.broker
    if make_broker(url, settings) is None:  # inprocess://
        options.pop("hosts", None)
        return run_federated_config(config, functions=functions, **options)
    if options.pop("continuations", None):
        from fedxab.run.continuation import in_process

        in_process(config)  # (refuses a broker: a continued run runs in process)

    def broker() -> Broker:
        made = make_broker(url, settings)
        assert made is not None  # the URL names a broker: checked above
        return made

    return run_on_broker_config(config, broker, functions=functions, **options)


def _on_broker(config: Config, broker: str | None) -> Config:
    """``config`` on ``broker`` (default: its own ``[broker] url``), which other processes must
    reach: a server or client alone needs ``kafka://`` (``memory://`` serves tests in one
    process). The URL is part of the config, so that defaults that follow the transport (signing
    on Kafka) hold."""
    if broker is not None:
        config = config.with_broker_url(broker)
    if config.broker is None or not config.broker.url.startswith(("kafka://", "memory://")):
        url = None if config.broker is None else config.broker.url
        raise ConfigError(
            "broker.url", f"a server or client alone needs a broker, kafka://HOST:PORT; got {url!r}"
        )
    return config


def _broker_of(config: Config) -> Any:
    from fedxab.broker.factory import make_broker

    assert config.broker is not None
    return make_broker(config.broker.url, config.broker)


def serve(
    config: Config, *, broker: str | None = None, checkpoint_dir: str | None = None
) -> RunResults:
    """The server of every run of ``config`` on ``broker`` (default: the config's), until the
    clients are done; the results. It never needs, imports or sees the clients' objectives."""
    from fedxab.agents.distributed import serve as serve_on

    config = _on_broker(config, broker)

    async def main() -> RunResults:
        async with _broker_of(config) as transport:
            return await serve_on(config, transport, checkpoint_dir=checkpoint_dir)

    return asyncio.run(main())


def host_clients(
    config: Config,
    client_ids: Sequence[int],
    *,
    functions: Functions | None = None,
    broker: str | None = None,
) -> RunResults:
    """Clients ``client_ids`` of every run of ``config`` on ``broker``, evaluating
    ``functions`` (default: the config's ``[objective] function``); their own results: what
    each observed and its trials (``runs[k].clients``), which under local DP only they have."""
    from fedxab.agents.distributed import host_clients as host_on

    config = _on_broker(config, broker)

    async def main() -> RunResults:
        async with _broker_of(config) as transport:
            return await host_on(config, transport, list(client_ids), functions=functions)

    return asyncio.run(main())


class AskTellClient:
    """Client ``client_id`` of a job on a broker, for an objective evaluated elsewhere.

    ::

        with AskTellClient(config, client_id=0, broker="kafka://127.0.0.1:9092") as client:
            while (x := client.ask()) is not None:
                client.tell(x, my_lab_measures(x))
        outcomes = client.outcomes   # one per run: what this client observed

    The client agent runs in a background thread; ``ask`` blocks until the algorithm needs a
    point (or returns None once every run of the config is over), ``tell`` gives the observed
    value, in the config's direction. Each point asked must be told before the next ask. With a
    ``[space]`` in the config, ``ask`` returns the parameters by name (a dict, in the user's
    units) and ``tell`` takes them back.
    """

    def __init__(self, config: Config, client_id: int, *, broker: str | None = None) -> None:
        config = _on_broker(config, broker)
        if config.search_space is not None and config.objective.style != "params":
            data = config.to_dict()  # the agent hands this client's calls the parameters
            data["objective"] = {**data["objective"], "style": "params"}
            config = config_from_dict(data)
        self.config = config
        self.client_id = client_id
        self.outcomes: list[ClientOutcome] = []
        """What this client observed, one per finished run."""
        self._asked: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._told: queue.Queue[float] = queue.Queue()
        self._pending: np.ndarray | dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._work, name="fedxab-ask-tell", daemon=True)
        self._started = False

    # --------------------------------------------------------------------- the user's side
    def __enter__(self) -> AskTellClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=0 if exc and exc[0] is not None else None)

    def start(self) -> None:
        """Start the client agent (``with`` does it)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def ask(self, timeout: float | None = None) -> np.ndarray | dict[str, Any] | None:
        """The next point to evaluate (with a ``[space]``: its parameters by name), or None
        when every run is over (blocks until then)."""
        if self._pending is not None:
            raise FedxabError(
                f"client {self.client_id}: tell the value of {_shown(self._pending)} before "
                "asking for another point"
            )
        self.start()
        try:
            kind, value = self._asked.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"client {self.client_id}: no point to evaluate yet") from None
        if kind == "error":
            raise value
        if kind == "done":
            return None
        self._pending = value
        return value.copy()

    def tell(self, x: Sequence[float] | np.ndarray | Mapping[str, Any], value: float) -> None:
        """The value observed at ``x`` (the point, or parameters, :meth:`ask` returned)."""
        pending = self._pending
        if isinstance(pending, dict):
            same = isinstance(x, Mapping) and dict(x) == pending
        else:
            same = pending is not None and np.array_equal(np.asarray(x, dtype=float), pending)
        if not same:
            raise FedxabError(
                f"client {self.client_id}: tell(x, value) must give the point the last ask() "
                f"returned, {None if pending is None else _shown(pending)}"
            )
        self._pending = None
        self._told.put(value)

    # ------------------------------------------------------------- the agent's side (thread)
    def _evaluate(self, x: np.ndarray | dict[str, Any]) -> float:
        """The objective as the client agent sees it: ask the user, wait for the value (with
        a ``[space]`` the agent passes the parameters by name)."""
        point = dict(x) if isinstance(x, Mapping) else np.array(x, dtype=float)
        self._asked.put(("point", point))
        return self._told.get()

    def _work(self) -> None:
        from fedxab.agents.distributed import client_agent

        async def main() -> None:
            async with _broker_of(self.config) as transport:
                for seed in self.config.run.seeds:
                    agent = client_agent(
                        self.config, seed, transport, [self.client_id], functions=self._evaluate
                    )
                    await agent.run()
                    self.outcomes.append(agent.outcomes()[self.client_id])  # (with its trials)

        try:
            asyncio.run(main())
        except BaseException as exc:  # handed to the user's thread by the next ask()
            self._asked.put(("error", exc))
        else:
            self._asked.put(("done", None))


def _shown(point: np.ndarray | dict[str, Any]) -> Any:
    return point if isinstance(point, dict) else point.tolist()
