"""Monitoring: live Prometheus metrics of a federation and regret plots from results files.

- :mod:`fedxab.monitoring.metrics`: :class:`~fedxab.monitoring.metrics.FederationMetrics`, the
  metric set (regret, phases, messages and bytes, reports, clients, epsilon) in a registry of its
  own, updated by the runners;
- :mod:`fedxab.monitoring.endpoint`: :class:`~fedxab.monitoring.endpoint.MetricsEndpoint`, which
  serves a registry at ``/metrics`` (``--metrics-port`` of ``fedxab run``, ``server``, ``client``);
- :mod:`fedxab.monitoring.plots`: regret figures from results files (``fedxab plot``).

The Grafana dashboard that reads these metrics is ``deploy/grafana/dashboards/fedxab.json``.
"""
