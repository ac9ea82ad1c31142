"""One federated run, without I/O: what every runner (in-process, server agent, client agent)
shares. :mod:`~fedxab.run.identity` says which run this is and what all its parties must agree
on; :mod:`~fedxab.run.assembly` builds a run's parts from a config; :mod:`~fedxab.run.outcome`
keeps what a client observed of its own objective."""
