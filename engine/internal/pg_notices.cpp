// The PostgreSQL Store (pg_store.h): subscriptions and the notices the schema's triggers
// write. Several processes commit at once here, and a sequence's numbers are handed out in
// the order transactions ask, not the order they commit: a notice's place is (xid, seq), and
// a reader takes only notices of transactions older than every transaction still running
// (pg_snapshot_xmin), so no notice can later appear behind a cursor.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/pg_store.h"

namespace engine::internal {

namespace {

constexpr const char* kHorizon = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint";

constexpr const char* kSubscriptionColumns =
    "SELECT id, api, callback_uri, filter, auth_types, auth, verbosity, created_ms, cursor_xid,"
    " cursor_seq, attempts, failing_since_ms, next_attempt_ms, failing, last_error, delivered,"
    " last_delivered_ms, (SELECT count(*) FROM notices n"
    " WHERE (n.xid, n.seq) > (s.cursor_xid, s.cursor_seq)"
    " AND n.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint) FROM subscriptions s";

// One row of kSubscriptionColumns, without its authentication: its types and sealed text
// (Sealer::read_subscription_auth) go to `auth`.
SubscriptionRecord read_subscription(const PgResult& q, int row,
                                     std::pair<std::string, std::string>& auth) {
  SubscriptionRecord r;
  r.id = q.text(row, 0);
  r.api = q.text(row, 1);
  r.callback_uri = q.text(row, 2);
  r.filter = object_or_empty(q.text(row, 3));
  auth = {q.text(row, 4), q.text(row, 5)};
  r.verbosity = q.text(row, 6);
  r.created_ms = q.i64(row, 7);
  r.cursor.xid = q.i64(row, 8);
  r.cursor.seq = q.i64(row, 9);
  r.attempts = static_cast<int>(q.i64(row, 10));
  r.failing_since_ms = q.i64(row, 11);
  r.next_attempt_ms = q.i64(row, 12);
  r.failing = q.i64(row, 13) != 0;
  r.last_error = q.text(row, 14);
  r.delivered = q.i64(row, 15);
  r.last_delivered_ms = q.i64(row, 16);
  r.backlog = q.i64(row, 17);
  return r;
}

}  // namespace

base::Status PgStore::put_subscription(const SubscriptionRecord& rec) {
  std::string auth = sealer_.seal_subscription_auth(rec);
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    // Past every notice of a finished transaction: it hears of what commits after it.
    w_.run(std::string("INSERT INTO subscriptions(id, api, callback_uri, filter, auth_types, auth,"
                       " verbosity, created_ms, cursor_xid, cursor_seq) VALUES($1, $2, $3, $4,"
                       " $5, $6, $7, $8, ") +
               kHorizon + " - 1, 9223372036854775807)",
           {rec.id, rec.api, rec.callback_uri, json::serialize(rec.filter),
            subscription_auth_types(rec.auth), auth, rec.verbosity, rec.created_ms});
    return base::Status::Ok();
  });
}

base::Result<std::vector<SubscriptionRecord>> PgStore::list_subscriptions(bool with_secrets) {
  std::vector<SubscriptionRecord> out;
  std::vector<std::pair<std::string, std::string>> auths;
  {
    std::lock_guard<std::mutex> lock(rmu_);
    base::Status s = guard(r_, [&] {
      auto q = r_.run(std::string(kSubscriptionColumns) + " ORDER BY created_ms, id");
      for (int i = 0; i < q.rows(); ++i) {
        auths.emplace_back();
        out.push_back(read_subscription(q, i, auths.back()));
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

base::Result<SubscriptionRecord> PgStore::get_subscription(std::string_view id, bool with_secrets) {
  SubscriptionRecord r;
  std::pair<std::string, std::string> auth;
  {
    std::lock_guard<std::mutex> lock(rmu_);
    base::Status s = guard(r_, [&] {
      auto q = r_.run(std::string(kSubscriptionColumns) + " WHERE id = $1", {std::string(id)});
      if (q.rows() == 0)
        return base::Status::NotFound("no subscription \"" + base::printable(id) + "\"");
      r = read_subscription(q, 0, auth);
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

base::Status PgStore::delete_subscription(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    auto q = w_.run("DELETE FROM subscriptions WHERE id = $1", {std::string(id)});
    if (q.affected() == 0)
      return base::Status::NotFound("no subscription \"" + base::printable(id) + "\"");
    return base::Status::Ok();
  });
}

base::Status PgStore::record_delivery(const SubscriptionRecord& rec) {
  std::lock_guard lock(wmu_);
  return guard(w_, [&] {
    auto u = w_.run(
        "UPDATE subscriptions SET cursor_xid = $2, cursor_seq = $3, attempts = $4,"
        " failing_since_ms = $5, next_attempt_ms = $6, failing = $7, last_error = $8,"
        " delivered = $9, last_delivered_ms = $10"
        " WHERE id = $1 AND (cursor_xid, cursor_seq) <= ($2::bigint, $3::bigint)",
        {rec.id, rec.cursor.xid, rec.cursor.seq, rec.attempts, rec.failing_since_ms,
         rec.next_attempt_ms, rec.failing ? 1 : 0, rec.last_error, rec.delivered,
         rec.last_delivered_ms});
    if (u.affected() == 0 &&
        w_.run("SELECT 1 FROM subscriptions WHERE id = $1", {rec.id}).rows() == 0)
      return base::Status::NotFound("no subscription \"" + rec.id + "\"");
    return base::Status::Ok();  // (or another sender is further on: its record stands)
  });
}

base::Result<std::vector<NoticeRecord>> PgStore::notices_after(const NoticeCursor& after,
                                                               size_t limit) {
  std::vector<NoticeRecord> out;
  std::lock_guard<std::mutex> lock(rmu_);
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT xid, seq, id, at_ms, kind, op_id, instance_id,"
                                " package_id, operation, state, error, subject FROM notices"
                                " WHERE (xid, seq) > ($1::bigint, $2::bigint) AND xid < ") +
                        kHorizon + " ORDER BY xid, seq LIMIT $3",
                    {after.xid, after.seq, static_cast<int64_t>(limit)});
    for (int i = 0; i < q.rows(); ++i) {
      NoticeRecord n;
      n.at.xid = q.i64(i, 0);
      n.at.seq = q.i64(i, 1);
      n.id = q.text(i, 2);
      n.at_ms = q.i64(i, 3);
      n.kind = q.text(i, 4);
      n.op_id = q.text(i, 5);
      n.instance_id = q.text(i, 6);
      n.package_id = q.text(i, 7);
      n.operation = q.text(i, 8);
      n.state = q.text(i, 9);
      n.error = parse_or_null(q.text(i, 10));
      n.subject = object_or_empty(q.text(i, 11));
      out.push_back(std::move(n));
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<std::string>> PgStore::due_subscriptions(int64_t now) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(rmu_);
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT id FROM subscriptions s WHERE next_attempt_ms <= $1 AND"
                                " EXISTS (SELECT 1 FROM notices n WHERE (n.xid, n.seq) >"
                                " (s.cursor_xid, s.cursor_seq) AND n.xid < ") +
                        kHorizon + ") ORDER BY created_ms, id",
                    {now});
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(q.text(i, 0));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<bool> PgStore::claim_subscription(std::string_view id, const std::string& owner,
                                               int64_t ttl_ms) {
  bool mine = false;
  std::lock_guard lock(wmu_);
  base::Status s = guard(w_, [&] {
    int64_t at = now_ms();
    auto q = w_.run(
        "UPDATE subscriptions SET sender = $2, sender_until_ms = $3 WHERE id = $1 AND"
        " (sender = $2 OR sender_until_ms < $4)",
        {std::string(id), owner, at + ttl_ms, at});
    mine = q.affected() > 0;
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return mine;
}

base::Result<int64_t> PgStore::prune_notices() {
  int64_t n = 0;
  std::lock_guard lock(wmu_);
  base::Status s = guard(w_, [&] {
    auto q = w_.run(
        "DELETE FROM notices n WHERE NOT EXISTS (SELECT 1 FROM subscriptions)"
        " OR (n.xid, n.seq) <= (SELECT cursor_xid, cursor_seq FROM subscriptions"
        " ORDER BY cursor_xid, cursor_seq LIMIT 1)");
    n = q.affected();
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return n;
}

}  // namespace engine::internal
