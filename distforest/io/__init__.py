"""Input adapters: turn files and in-memory objects into a numeric :class:`Table`."""

from distforest.io.tables import SUPPORTED_EXTENSIONS, Table, load_table, read_frame

__all__ = ["SUPPORTED_EXTENSIONS", "Table", "load_table", "read_frame"]
