"""Where a store URL points, said for a person, and whether a SQLite store is there at all.

The commands that only read the store (`review`, `agents`) must neither create an empty SQLite
file where none was (SQLite makes one on connecting) nor leave the user guessing which store
they read: a relative `sqlite+aiosqlite:///ragmon.db` is relative to the working directory.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

NO_STORE_HINT = (
    "nothing was scored into it: run the daemon (`run`) or `score` from this folder first,"
    " or point store.url (RAGMON_STORE__URL) at the store they write"
)


def sqlite_file(url: str) -> Path | None:
    """The absolute path of a SQLite store's file (None: not SQLite, in memory, unparseable)."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database or database == ":memory:":
        return None
    return Path(database).absolute()


def describe_store(url: str, sanitized: str) -> str:
    """`sanitized` (the URL with its password hidden), with the file it means for SQLite."""
    path = sqlite_file(url)
    return f"{sanitized} ({path})" if path is not None else sanitized


def missing_store(url: str) -> Path | None:
    """The file of a SQLite store that does not exist (None when it exists, or not SQLite)."""
    path = sqlite_file(url)
    return path if path is not None and not path.exists() else None


def scrubbed_error(exc: BaseException, url: str) -> str:
    """An exception's message without the store URL or its password."""
    message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    secrets = [url]
    try:
        password = make_url(url).password
    except Exception:
        password = None
    if password:
        secrets.append(str(password))
    for secret in secrets:
        message = message.replace(secret, "***")
    return message
