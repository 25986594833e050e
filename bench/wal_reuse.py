#!/usr/bin/env python3
"""One-row commits (WAL, synchronous=FULL) on a write-ahead log that grows with each commit
beside one SQLite reuses after a checkpoint: why the daemon reserves its log
(SqliteStore::reserve_log, docs/persistence.md). Prints the median commit time of each, two
rounds. Usage: python3 bench/wal_reuse.py [DIR] (default: a new folder under /tmp)."""
import os
import sqlite3
import statistics
import sys
import tempfile
import time


def fresh(path):
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("pragma journal_mode=wal")
    db.execute("pragma synchronous=full")
    db.execute("pragma wal_autocheckpoint=0")
    db.execute("create table t(id integer primary key, v text)")
    return db


def commits(db, n=400):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        db.execute("begin immediate")
        db.execute("insert into t(v) values(?)", ("x" * 300,))
        db.execute("commit")
        lat.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.002)
    return statistics.median(lat)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="wal-reuse-")
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
    for _ in range(2):
        growing = fresh(os.path.join(folder, "growing.db"))
        print("growing log: one-row commit p50 %.3f ms" % commits(growing))
        growing.close()
        reused = fresh(os.path.join(folder, "reused.db"))
        reused.execute("begin")
        for _ in range(6000):
            reused.execute("insert into t(v) values(?)", ("x" * 1000,))
        reused.execute("commit")
        reused.execute("pragma wal_checkpoint(PASSIVE)")  # the next commit restarts the log
        print("reused log: one-row commit p50 %.3f ms" % commits(reused))
        reused.close()


if __name__ == "__main__":
    main()
