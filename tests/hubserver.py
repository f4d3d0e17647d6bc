"""A real hub served by uvicorn on 127.0.0.1, in a thread, that tests can stop and restart."""

from sync.server import BackgroundHub as HubServer
from sync.server import free_port

__all__ = ["HubServer", "free_port"]
