// LISTEN/NOTIFY: how readers and daemons on PostgreSQL learn of a commit without polling.
// A commit that queues work for the daemons, or settles an operation (or an operator moves
// it), notifies the schema's channel in its own transaction (PostgreSQL delivers it when, and only
// if, the transaction commits). A listener is one more connection that LISTENs and sleeps in poll()
// on its socket: `op wait` returns at the commit that settles its operation, and a daemon
// takes a request the moment another process (a CLI, another daemon's API) commits it. The
// callers' timed reads stay as the fallback, so a notification lost with a connection costs
// one poll interval, never an operation.
#include <algorithm>
#include <thread>

#include <poll.h>

#include "engine/internal/pg_store.h"

namespace engine::internal {

PgListener::PgListener(const std::string& url, const std::string& display, const char* channel_sql)
    : conn_(url, display) {
  conn_.on_connect = [channel_sql](PgConn& c) {
    // The name is computed by the server from the schema, as the notifying SQL computes it,
    // and made of [a-z0-9_] only (a prefix and hex digits); quoted all the same.
    std::string name = c.run(std::string("SELECT ") + channel_sql).text(0, 0);
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char ch) {
          return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
        }))
      throw PgError("unexpected channel name", "", false);
    c.exec(("LISTEN \"" + name + "\"").c_str());
  };
}

bool PgListener::wait(std::chrono::milliseconds at_most) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (!conn_.connected()) {
      conn_.ensure();  // LISTENs: what was committed before now was not heard
      return true;
    }
    if (conn_.take_notifies() > 0)
      return true;
    struct pollfd p {
      conn_.socket(), POLLIN, 0
    };
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, at_most.count())));
    if (n <= 0)
      return false;
    return conn_.take_notifies() > 0;
  } catch (const std::exception&) {
    // The server is gone (restarted, unreachable) or refused: quiet for the time the caller
    // meant to wait (its timed reads go on); the call that connects again says "heard".
    std::this_thread::sleep_for(at_most);
    return false;
  }
}

PgListener& PgStore::listener(std::unique_ptr<PgListener>& slot, const char* channel_sql) {
  std::lock_guard<std::mutex> lock(lmu_);
  if (!slot)
    slot = std::make_unique<PgListener>(url_, display_, channel_sql);
  return *slot;
}

void PgStore::wait_for_change(std::chrono::milliseconds at_most) {
  listener(change_listener_, kChangeChannel).wait(at_most);
}

Store::WorkSignal PgStore::wait_for_work(std::chrono::milliseconds at_most) {
  return listener(work_listener_, kQueueChannel).wait(at_most) ? WorkSignal::kQueued
                                                               : WorkSignal::kQuiet;
}

}  // namespace engine::internal
