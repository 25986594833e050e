// Store::wait_for_change: how a reader (op wait, op watch) sleeps until the next commit.
// SQLite: every commit appends to the write-ahead log, whichever process makes it, so an
// inotify watch on `<db>-wal` wakes the reader at once, and PRAGMA data_version tells when
// the commit is visible; the timeout stays as the fallback (a checkpoint that truncates the
// log, a database not in WAL mode).
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"

namespace engine {

void Store::wait_for_change(std::chrono::milliseconds at_most) {
  std::this_thread::sleep_for(at_most);
}

namespace internal {

SqliteStore::~SqliteStore() {
  if (watch_fd_ >= 0)
    ::close(watch_fd_);
}

void SqliteStore::wait_for_change(std::chrono::milliseconds at_most) {
  using Clock = std::chrono::steady_clock;
  if (watch_fd_ == -1) {
    watch_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    std::string wal = db_file() + "-wal";
    if (watch_fd_ >= 0 && ::inotify_add_watch(watch_fd_, wal.c_str(), IN_MODIFY) < 0) {
      ::close(watch_fd_);
      watch_fd_ = -2;  // no watch: sleep
    } else if (watch_fd_ < 0) {
      watch_fd_ = -2;
    }
    // The log is written before its commit is visible (the commit record, the sync, then
    // the log's index): a reader woken by the first write would read the state before it
    // and sleep on. PRAGMA data_version, on a connection of the watch's own, changes once
    // a commit of any other connection is visible.
    if (watch_fd_ >= 0) {
      try {
        watch_db_ = std::make_unique<SQLite::Database>(db_file(), SQLite::OPEN_READONLY);
        watch_version_ = watch_db_->execAndGet("PRAGMA data_version").getInt64();
      } catch (const std::exception&) {
        watch_db_.reset();  // woken by the log alone
      }
    }
  }
  if (watch_fd_ < 0) {
    std::this_thread::sleep_for(at_most);
    return;
  }
  auto deadline = Clock::now() + at_most;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0)
      left = std::chrono::milliseconds(0);
    // For 50 ms after the log was last written, a commit is looked for every millisecond,
    // across calls: the writes seen may hold a commit that becomes visible only after its
    // sync (or a second commit behind the one that woke the last call), or none (rolled
    // back); then the watch goes back to waiting for the log.
    bool written = Clock::now() - watch_written_ < std::chrono::milliseconds(50);
    int wait_ms = static_cast<int>(written ? std::min<int64_t>(left.count(), 1) : left.count());
    struct pollfd p {
      watch_fd_, POLLIN, 0
    };
    ::poll(&p, 1, wait_ms);
    // Drain what is queued: one wake-up for any number of writes.
    alignas(struct inotify_event) char buf[4096];
    while (::read(watch_fd_, buf, sizeof buf) > 0) {
      written = true;
      watch_written_ = Clock::now();
    }
    if (written) {
      if (watch_db_ == nullptr) {
        watch_written_ = {};
        return;
      }
      try {
        int64_t v = watch_db_->execAndGet("PRAGMA data_version").getInt64();
        if (v != watch_version_) {
          watch_version_ = v;
          return;
        }
      } catch (const std::exception&) {
        watch_written_ = {};
        return;  // cannot tell: as if it were there
      }
    }
    if (Clock::now() >= deadline)
      return;
  }
}

}  // namespace internal
}  // namespace engine
