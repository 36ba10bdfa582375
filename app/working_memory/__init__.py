"""Working memory (hot tier): the Redis store and pure-Python context assembly."""

from app.working_memory.context import ContextItem, ContextResult, Strategy, assemble
from app.working_memory.items import WMItem
from app.working_memory.store import PlaceResult, WorkingMemoryNotInitialized, WorkingMemoryStore

__all__ = [
    "ContextItem",
    "ContextResult",
    "PlaceResult",
    "Strategy",
    "WMItem",
    "WorkingMemoryNotInitialized",
    "WorkingMemoryStore",
    "assemble",
]
