"""Pure folds from events to views; materialising files; replay; point-in-time reads."""

from .memory import Memory
from .views import Views

__all__ = ["Memory", "Views"]
