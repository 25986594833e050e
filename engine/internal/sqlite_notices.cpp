// The SQLite Store (sqlite_store.h): subscriptions and the notices the schema's triggers
// write. SQLite serialises writers, so a notice's seq is its commit order and the cursor's
// xid is always 0.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"

namespace engine::internal {

namespace {

constexpr const char* kSubscriptionColumns =
    "SELECT id, api, callback_uri, filter, auth_types, auth, verbosity, created_ms, cursor_seq,"
    " attempts, failing_since_ms, next_attempt_ms, failing, last_error, delivered,"
    " last_delivered_ms, (SELECT count(*) FROM notices n WHERE n.seq > s.cursor_seq)"
    " FROM subscriptions s";

// One row of kSubscriptionColumns, without its authentication: its types and sealed text
// (Sealer::read_subscription_auth) go to `auth`.
SubscriptionRecord read_subscription(SQLite::Statement& q,
                                     std::pair<std::string, std::string>& auth) {
  SubscriptionRecord r;
  r.id = text(q, 0);
  r.api = text(q, 1);
  r.callback_uri = text(q, 2);
  r.filter = object_or_empty(text(q, 3));
  auth = {text(q, 4), text(q, 5)};
  r.verbosity = text(q, 6);
  r.created_ms = q.getColumn(7).getInt64();
  r.cursor.seq = q.getColumn(8).getInt64();
  r.attempts = q.getColumn(9).getInt();
  r.failing_since_ms = q.getColumn(10).getInt64();
  r.next_attempt_ms = q.getColumn(11).getInt64();
  r.failing = q.getColumn(12).getInt() != 0;
  r.last_error = text(q, 13);
  r.delivered = q.getColumn(14).getInt64();
  r.last_delivered_ms = q.getColumn(15).getInt64();
  r.backlog = q.getColumn(16).getInt64();
  return r;
}

}  // namespace

base::Status SqliteStore::put_subscription(const SubscriptionRecord& rec) {
  std::string auth = sealer_.seal_subscription_auth(rec);
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement ins(
        w_,
        "INSERT INTO subscriptions(id, api, callback_uri, filter, auth_types, auth, verbosity,"
        " created_ms, cursor_seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?,"
        " COALESCE((SELECT max(seq) FROM notices), 0))");
    ins.bind(1, rec.id);
    ins.bind(2, rec.api);
    ins.bind(3, rec.callback_uri);
    ins.bind(4, json::serialize(rec.filter));
    ins.bind(5, subscription_auth_types(rec.auth));
    ins.bind(6, auth);
    ins.bind(7, rec.verbosity);
    ins.bind(8, static_cast<int64_t>(rec.created_ms));
    ins.exec();
    return base::Status::Ok();
  });
}

base::Result<std::vector<SubscriptionRecord>> SqliteStore::list_subscriptions(bool with_secrets) {
  std::vector<SubscriptionRecord> out;
  std::vector<std::pair<std::string, std::string>> auths;
  {
    auto rd = readers_.acquire();
    base::Status s = guard([&] {
      auto q_use = rd->q.prepare(std::string(kSubscriptionColumns) + " ORDER BY created_ms, id");
      SQLite::Statement& q = *q_use;
      while (q.executeStep()) {
        auths.emplace_back();
        out.push_back(read_subscription(q, auths.back()));
      }
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    base::Status st =
        sealer_.read_subscription_auth(out[i], auths[i].first, auths[i].second, with_secrets);
    if (!st.ok())
      return st;
  }
  return out;
}

base::Result<SubscriptionRecord> SqliteStore::get_subscription(std::string_view id,
                                                               bool with_secrets) {
  SubscriptionRecord r;
  std::pair<std::string, std::string> auth;
  {
    auto rd = readers_.acquire();
    base::Status s = guard([&] {
      auto q_use = rd->q.prepare(std::string(kSubscriptionColumns) + " WHERE id = ?");
      SQLite::Statement& q = *q_use;
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no subscription \"" + base::printable(id) + "\"");
      r = read_subscription(q, auth);
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
  }
  if (base::Status st = sealer_.read_subscription_auth(r, auth.first, auth.second, with_secrets);
      !st.ok())
    return st;
  return r;
}

base::Status SqliteStore::delete_subscription(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement del(w_, "DELETE FROM subscriptions WHERE id = ?");
    del.bind(1, std::string(id));
    if (del.exec() == 0)
      return base::Status::NotFound("no subscription \"" + base::printable(id) + "\"");
    return base::Status::Ok();
  });
}

base::Status SqliteStore::record_delivery(const SubscriptionRecord& rec) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement u(
        w_,
        "UPDATE subscriptions SET cursor_seq = ?2, attempts = ?3, failing_since_ms = ?4,"
        " next_attempt_ms = ?5, failing = ?6, last_error = ?7, delivered = ?8,"
        " last_delivered_ms = ?9 WHERE id = ?1 AND cursor_seq <= ?2");
    u.bind(1, rec.id);
    u.bind(2, static_cast<int64_t>(rec.cursor.seq));
    u.bind(3, rec.attempts);
    u.bind(4, static_cast<int64_t>(rec.failing_since_ms));
    u.bind(5, static_cast<int64_t>(rec.next_attempt_ms));
    u.bind(6, rec.failing ? 1 : 0);
    u.bind(7, rec.last_error);
    u.bind(8, static_cast<int64_t>(rec.delivered));
    u.bind(9, static_cast<int64_t>(rec.last_delivered_ms));
    if (u.exec() == 0) {
      SQLite::Statement q(w_, "SELECT 1 FROM subscriptions WHERE id = ?");
      q.bind(1, rec.id);
      if (!q.executeStep())
        return base::Status::NotFound("no subscription \"" + rec.id + "\"");
      // Another sender is further on: its record stands.
    }
    return base::Status::Ok();
  });
}

base::Result<std::vector<NoticeRecord>> SqliteStore::notices_after(const NoticeCursor& after,
                                                                   size_t limit) {
  std::vector<NoticeRecord> out;
  auto rd = readers_.acquire();
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT seq, id, at_ms, kind, op_id, instance_id, package_id, operation,"
        " state, error, subject FROM notices WHERE seq > ? ORDER BY seq LIMIT ?");
    SQLite::Statement& q = *q_use;
    q.bind(1, static_cast<int64_t>(after.seq));
    q.bind(2, static_cast<int64_t>(limit));
    while (q.executeStep()) {
      NoticeRecord n;
      n.at.seq = q.getColumn(0).getInt64();
      n.id = text(q, 1);
      n.at_ms = q.getColumn(2).getInt64();
      n.kind = text(q, 3);
      n.op_id = text(q, 4);
      n.instance_id = text(q, 5);
      n.package_id = text(q, 6);
      n.operation = text(q, 7);
      n.state = text(q, 8);
      n.error = parse_or_null(text(q, 9));
      n.subject = object_or_empty(text(q, 10));
      out.push_back(std::move(n));
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<std::string>> SqliteStore::due_subscriptions(int64_t now) {
  std::vector<std::string> out;
  auto rd = readers_.acquire();
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT id FROM subscriptions s WHERE next_attempt_ms <= ? AND EXISTS"
        " (SELECT 1 FROM notices n WHERE n.seq > s.cursor_seq)"
        " ORDER BY created_ms, id");
    SQLite::Statement& q = *q_use;
    q.bind(1, static_cast<int64_t>(now));
    while (q.executeStep())
      out.push_back(text(q, 0));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<int64_t> SqliteStore::prune_notices() {
  int64_t n = 0;
  std::lock_guard lock(wmu_);
  base::Status s = guard([&] {
    SQLite::Statement del(w_,
                          "DELETE FROM notices WHERE NOT EXISTS (SELECT 1 FROM subscriptions)"
                          " OR seq <= (SELECT min(cursor_seq) FROM subscriptions)");
    n = del.exec();
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return n;
}

}  // namespace engine::internal
