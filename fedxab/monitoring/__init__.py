"""Monitoring: regret plots now; Prometheus metrics and Grafana come with the monitoring issue."""
