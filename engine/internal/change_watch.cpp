// Store::wait_for_change: how a reader (op wait, op watch) sleeps until the next commit.
// SQLite: every commit appends to the write-ahead log, whichever process makes it, so an
// inotify watch on `<db>-wal` wakes the reader at once; the timeout stays as the fallback
// (a checkpoint that truncates the log, a database not in WAL mode).
#include <chrono>
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
  if (watch_fd_ == -1) {
    watch_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    std::string wal = db_file() + "-wal";
    if (watch_fd_ >= 0 && ::inotify_add_watch(watch_fd_, wal.c_str(), IN_MODIFY) < 0) {
      ::close(watch_fd_);
      watch_fd_ = -2;  // no watch: sleep
    } else if (watch_fd_ < 0) {
      watch_fd_ = -2;
    }
  }
  if (watch_fd_ < 0) {
    std::this_thread::sleep_for(at_most);
    return;
  }
  struct pollfd p {
    watch_fd_, POLLIN, 0
  };
  ::poll(&p, 1, static_cast<int>(at_most.count()));
  // Drain what is queued: one wake-up for any number of commits.
  alignas(struct inotify_event) char buf[4096];
  while (::read(watch_fd_, buf, sizeof buf) > 0) {
  }
}

}  // namespace internal
}  // namespace engine
