"""Runners that drive algorithms: the in-process runner now, asyncio agents with the agents issue."""
