"""Monitoring: plots now; Prometheus metrics and the Grafana dashboard come with the monitoring issue."""
