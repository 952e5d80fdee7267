#!/usr/bin/env python3
"""Brings the tuning-DB fixtures of the fuzz regressions (db_*.db here) to the current schema.

A DB import refuses a file of another schema version before it looks any further, so each
fixture must be at the version of schema/migrations/ for its test to reach the damage it
plants (an edited column, a row breaking a CHECK, an index missing a row). This applies the
migrations after each file's user_version as dc's migrate() does (foreign keys off, one
transaction, user_version per step) and leaves the planted damage alone: none of the
migrations rewrites the tables the damage sits in. A file SQLite cannot open at all (its
damage is in the schema record) is left as it is, and said so.

  tests/data/fuzz/upgrade_db_fixtures.py            upgrade every fixture in place
"""
import pathlib
import re
import sqlite3
import sys

HERE = pathlib.Path(__file__).resolve().parent
MIGRATIONS = HERE.parents[2] / "schema" / "migrations"


def migrations():
    found = []
    for path in sorted(MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        found.append((int(path.name[:4]), path.read_text()))
    versions = [v for v, _ in found]
    if versions != list(range(1, len(found) + 1)):
        sys.exit(f"error: migrations in {MIGRATIONS} are not numbered 1..N: {versions}")
    return found


def upgrade(path, steps):
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        print(f"{path.name}: left as it is (SQLite cannot read it: {e})")
        return
    todo = [(v, sql) for v, sql in steps if v > version]
    if not todo:
        print(f"{path.name}: at version {version} already")
        return
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA ignore_check_constraints = ON")  # a planted row that breaks one stays
    conn.execute("BEGIN IMMEDIATE")
    try:
        for v, sql in todo:
            for statement in split(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {v}")
    except (sqlite3.DatabaseError, MemoryError) as e:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        print(f"{path.name}: left at version {version} (SQLite cannot migrate it: {str(e) or type(e).__name__})")
        return
    conn.execute("COMMIT")
    conn.close()
    print(f"{path.name}: version {version} -> {todo[-1][0]}")


def split(script):
    """The statements of a migration (sqlite3.complete_statement decides where one ends)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        if not current and re.match(r"\s*(--.*)?$", line):
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current)
            current = ""
    if current.strip():
        sys.exit(f"error: a migration ends in an unfinished statement: {current[:80]!r}")
    return statements


def main():
    steps = migrations()
    for path in sorted(HERE.glob("db_*.db")):
        upgrade(path, steps)


if __name__ == "__main__":
    main()
