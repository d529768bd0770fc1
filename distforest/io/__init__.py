"""Input adapters: turn files and in-memory objects into a numeric :class:`Table`.

Also the table writers (:func:`write_table`: CSV, Parquet, Zarr, never half-written).
"""

from distforest.io.tables import SUPPORTED_EXTENSIONS, Table, load_table, read_frame
from distforest.io.writers import write_table

__all__ = ["SUPPORTED_EXTENSIONS", "Table", "load_table", "read_frame", "write_table"]
