"""Runners that drive algorithms: in-process now; asyncio agents come with the agents issue."""
