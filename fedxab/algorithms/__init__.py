"""Sans-I/O optimization algorithms: pure state machines on numpy, no I/O of any kind."""
