"""Pure folds from events to views; materialising files; replay; point-in-time reads.

`Memory` and `Views` are imported when first asked for: the child processes of a views build import
`projections.bulk` alone, without the whole workspace API behind `Memory`."""

__all__ = ["Memory", "Views"]


def __getattr__(name: str):
    if name == "Memory":
        from .memory import Memory

        return Memory
    if name == "Views":
        from .views import Views

        return Views
    raise AttributeError(f"module 'projections' has no attribute {name!r}")
