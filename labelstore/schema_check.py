"""Whether a database at this code's schema revision holds that schema's tables: alembic's version row says
what was migrated, not what is there now. A table dropped (or a column lost to a hand-made copy) by someone
with the sqlite3 shell passed `db current` and the server's start, and every request that needed it was a 500.
"""

from __future__ import annotations

import sqlalchemy as sa

import labelstore.fleet_schema  # noqa: F401 - its tables join the metadata (not `from labelstore`: a circle)
from labelstore.schema import metadata

SHOWN = 5  # problems named in the message; the rest counted


def lacking(conn) -> str | None:
    """What the database lacks of this code's tables and columns, in words; None when it has them all
    (tables of its own beside them are its business). Read from the catalog: milliseconds, no table scanned."""
    inspector = sa.inspect(conn)
    present = set(inspector.get_table_names())
    problems = []
    for table in metadata.sorted_tables:
        if table.name not in present:
            problems.append(f"table {table.name}")
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        gone = [c.name for c in table.columns if c.name not in have]
        if gone:
            problems.append(f"column{'s' if len(gone) > 1 else ''} {', '.join(gone)} of {table.name}")
    if not problems:
        return None
    more = f" and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return "no " + "; no ".join(problems[:SHOWN]) + more
