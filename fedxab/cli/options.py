"""The options several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedxab.monitoring.progress import ProgressMode

SeedOption = Annotated[int | None, typer.Option(help="Override run.seed.", show_default=False)]


RepeatsOption = Annotated[
    int | None, typer.Option(help="Override run.repeats.", show_default=False)
]


BudgetOption = Annotated[
    int | None,
    typer.Option(help="Override run.budget (evaluations per client).", show_default=False),
]


MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics while the job runs "
        "(0: a free port, printed).",
        show_default=False,
    ),
]


MetricsHostOption = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        help="Interface of --metrics-port (0.0.0.0: every interface, e.g. in a container).",
    ),
]


ServeAfterOption = Annotated[
    float | None,
    typer.Option(
        "--serve-after",
        min=0,
        help="With --metrics-port or --dashboard: keep serving them SECONDS after the job "
        "ends (inf: until Ctrl-C).",
        show_default=False,
    ),
]


DashboardOption = Annotated[
    bool,
    typer.Option(
        "--dashboard",
        help="Serve the live dashboard (regret, phases, epsilon per client, report outcomes, "
        "a user's objective's trials and the recommendation by name) "
        "at http://127.0.0.1:PORT/ while the job runs (--dashboard-port; afterwards: "
        "`fedxab dashboard DIR`).",
    ),
]


DashboardPortOption = Annotated[
    int,
    typer.Option(
        "--dashboard-port",
        min=0,
        max=65535,
        help="Port of the dashboard (--dashboard, `fedxab dashboard`; 0: a free one, printed).",
    ),
]


DASHBOARD_PORT = 8050
"""The dashboard's default port."""


NamespaceOption = Annotated[
    str | None,
    typer.Option(
        help="Federated runs on a broker: the topic namespace (overrides broker.namespace); "
        "another namespace starts a new run on new topics.",
        show_default=False,
    ),
]


KeysDirOption = Annotated[
    Path | None,
    typer.Option(
        "--keys-dir",
        help="Directory of the message-signing keys (`fedxab keys generate`: private/ and "
        "public/, or HMAC client-N.key files). Overrides security.keys_dir; Kafka runs sign by "
        "default.",
        show_default=False,
    ),
]


ProgressOption = Annotated[
    ProgressMode,
    typer.Option(
        "--progress",
        envvar="FEDXAB_PROGRESS",
        case_sensitive=False,
        help="Progress display: bar (redrawn in place, fits the terminal's width), lines (a "
        "plain line per 10% of a run and at least every minute: CI logs, pipes), none; auto: "
        "bar on a terminal, else lines. --quiet: none.",
    ),
]


BROKER_HELP = "kafka://HOST:PORT[,HOST:PORT]; overrides broker.url."
