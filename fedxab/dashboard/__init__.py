"""The dashboard: a local, offline web page of a run, live while it goes and afterwards.

- :mod:`fedxab.dashboard.state`: :class:`~fedxab.dashboard.state.DashboardState`, the run
  observer that keeps what the page shows, in aggregate (its size does not grow with the clients);
- :mod:`fedxab.dashboard.server`: :class:`~fedxab.dashboard.server.DashboardServer`, which
  serves the page (``static/``, from the package: nothing from the internet) and its JSON on the
  loopback interface (``fedxab dashboard``, ``fedxab run --dashboard``).
"""
