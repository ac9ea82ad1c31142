"""What every command shares: its console, a :class:`~fedxab.errors.FedxabError` as one red line
and exit status 2, signals, and the job's config with the command-line overrides."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from fedxab.errors import FedxabError

EXIT_ERROR = 2


def make_console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)


def show_notices() -> None:
    """Show the library's NOTICE lines (a server naming who joined and left its run,
    :mod:`fedxab.run.population`) at the default verbosity, as ``-v`` shows INFO."""
    from fedxab.run.population import NOTICE

    logger = logging.getLogger("fedxab")
    for handler in logger.handlers:
        if handler.level > NOTICE:
            handler.setLevel(NOTICE)
    if logger.getEffectiveLevel() > NOTICE:
        logger.setLevel(NOTICE)


@contextlib.contextmanager
def errors_as_exit_code() -> Iterator[None]:
    """Turn a FedxabError into one red ``error:`` line on stderr and exit status 2."""
    try:
        yield
    except FedxabError as exc:
        make_console(stderr=True).print(Text(f"error: {exc}", style="bold red"), soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        make_console(stderr=True).print(Text("error: interrupted", style="bold red"))
        raise typer.Exit(130) from None


def wait(seconds: float | None) -> None:
    """Block ``seconds`` (None: until Ctrl-C or SIGTERM, which end the wait quietly)."""
    import threading

    with contextlib.suppress(KeyboardInterrupt):
        interruptible(lambda: threading.Event().wait(seconds))


def load_job(
    config: Path | None,
    seed: int | None,
    repeats: int | None,
    budget: int | None,
    output: Path | None,
    broker: str | None,
    keys_dir: Path | None = None,
    namespace: str | None = None,
):
    """The config file (or the built-in default) with the command-line overrides applied."""
    from fedxab.config import default_config, load_config

    cfg = default_config() if config is None else load_config(config)
    cfg = cfg.with_run(
        seed=seed, repeats=repeats, budget=budget, output=None if output is None else str(output)
    )
    if broker is not None:
        cfg = _federated_override(cfg, "--broker", "broker", "url", broker)
    if keys_dir is not None:
        cfg = _federated_override(cfg, "--keys-dir", "security", "keys_dir", str(keys_dir))
    if namespace is not None:
        cfg = _federated_override(cfg, "--namespace", "broker", "namespace", namespace)
    return cfg


def _federated_override(cfg, option: str, section: str, key: str, value: str):
    """``cfg`` with ``[section] key = value`` (from command-line ``option``), a setting of
    federated runs only."""
    from fedxab.config import config_from_dict

    if getattr(cfg, section) is None:
        raise FedxabError(
            f"{option}: {cfg.algorithm.name!r} runs a single agent; {option} is a setting of "
            "federated runs only"
        )
    data = cfg.to_dict()
    data[section] = {**data.get(section, {}), key: value}
    return config_from_dict(data)


def interruptible(work):
    """Run ``work()``; SIGTERM ends it like Ctrl-C (agents close their subscriptions and
    brokers on the way out)."""
    import signal

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return work()
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_service(coro_factory):
    """Run an async service until it ends, or until SIGINT/SIGTERM cancels it cleanly."""
    import asyncio
    import signal

    signalled = []

    async def main():
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def stop(sig: int) -> None:
            signalled.append(sig)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        return await coro_factory()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError as exc:
        if signalled:
            raise KeyboardInterrupt from None
        # not a signal: a library cancelled a task it did not own (e.g. the Kafka client when
        # its broker went away); an error, not an interruption
        logging.getLogger(__name__).error("the service was cancelled from inside", exc_info=exc)
        raise FedxabError(
            "the service stopped: a task was cancelled from inside (see the traceback above); "
            "if the broker went away, restart it and the agents (a server with its checkpoint)"
        ) from None


def run_with(transport, work):
    """Run the coroutine ``work()`` with ``transport`` open (``async with``), until it ends or
    SIGINT/SIGTERM cancels it cleanly (:func:`run_service`)."""

    async def service():
        async with transport:
            return await work()

    return run_service(service)
