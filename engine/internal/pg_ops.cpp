// The PostgreSQL Store (pg_store.h): the executor's commits, operations, their outputs and
// events. The same rules as sqlite_ops.cpp, in PostgreSQL's terms: row locks (FOR UPDATE)
// where SQLite has its one writer.
#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <boost/json.hpp>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/internal/pg_store.h"
#include "engine/internal/sealing.h"

namespace engine::internal {

namespace {

constexpr const char* kOpColumns =
    "id, instance_id, operation, state, machine, package_digest, request, error, cursor, "
    "owner, cancel_requested, wake_at_ms, created_ms, updated_ms, epoch";
constexpr const char* kRunningIn = "state IN ('STARTING', 'PROCESSING', 'ROLLING_BACK')";
constexpr const char* kOpenIn =
    "state IN ('STARTING', 'PROCESSING', 'FAILED_TEMP', 'ROLLING_BACK')";

OpRecord read_op(const PgResult& q, int row) {
  OpRecord r;
  r.id = q.text(row, 0);
  r.instance_id = q.text(row, 1);
  r.operation = q.text(row, 2);
  r.state = parse_op_state(q.text(row, 3)).value_or(OpState::kFailed);
  r.machine_digest = q.text(row, 4);
  r.package_digest = q.text(row, 5);
  r.request = parse_or_null(q.text(row, 6));
  r.error = parse_or_null(q.text(row, 7));
  r.cursor = parse_or_null(q.text(row, 8));
  r.owner = q.text(row, 9);
  r.cancel_requested = q.i64(row, 10) != 0;
  r.wake_at_ms = q.i64(row, 11);
  r.created_ms = q.i64(row, 12);
  r.updated_ms = q.i64(row, 13);
  r.epoch = q.i64(row, 14);
  return r;
}

PgArg text_or_null(const std::string& s) {
  return s.empty() ? PgArg(std::nullopt) : PgArg(s);
}

// A PostgreSQL array literal of `v` ({"a","b",NULL}): every value quoted, '"' and '\'
// escaped, so any text goes through as one element. A statement takes a whole group's
// column as one parameter (unnest), whatever the group's size: one prepared statement.
std::string pg_array(const std::vector<std::optional<std::string>>& v) {
  size_t n = 2;
  for (const auto& x : v)
    n += (x ? x->size() + 3 : 5);
  std::string out;
  out.reserve(n);
  out += '{';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0)
      out += ',';
    if (!v[i]) {
      out += "NULL";
      continue;
    }
    out += '"';
    for (char c : *v[i]) {
      if (c == '"' || c == '\\')
        out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Inside a transaction of `c`: the listeners of `channel_sql` (kQueueChannel,
// kChangeChannel) wake when it commits, and never if it rolls back.
void notify(PgConn& c, const char* channel_sql) {
  c.run(std::string("SELECT pg_notify(") + channel_sql + ", '')");
}

// Whether a written batch of the group settles its operation (COMPLETED, FAILED_TEMP,
// FAILED, ROLLED_BACK: what `op wait` waits for): only then does the group commit notify.
// Once per operation, not per state change: a commit that notifies takes PostgreSQL's
// cluster-wide notify lock until it is flushed, which would line up every daemon's group
// commits behind each other.
bool settles_op(const std::vector<const Batch*>& batches) {
  for (const Batch* b : batches) {
    if (b->fenced)
      continue;
    for (const auto& o : b->ops) {
      if (o.state && (is_final(*o.state) || *o.state == OpState::kFailedTemp))
        return true;
    }
  }
  return false;
}

// Inside a transaction of `c`: the active operations daemon `name` held go back to the pool
// (its earlier start's, or a drained daemon's), and the other daemons hear it.
void put_back(PgConn& c, const std::string& name) {
  if (c.run(std::string("UPDATE ops SET owner = NULL WHERE owner = $1 AND ") + kRunningIn, {name})
          .affected() > 0)
    notify(c, kQueueChannel);
}

}  // namespace

base::Status PgStore::apply_rows(const std::vector<const Batch*>& batches) {
  static const std::string upd_op =
      std::string(
          "UPDATE ops SET state = COALESCE($2, state), cursor = COALESCE($3, cursor),"
          " error = CASE WHEN $4::boolean THEN $5 ELSE error END,"
          " wake_at_ms = COALESCE($6, wake_at_ms), owner = COALESCE($7, owner),"
          " updated_ms = $8 WHERE id = $1 AND ($9::bigint = 0 OR epoch = $9) AND ") +
      kRunningIn;
  // Most commits change neither state nor owner: leave them out of the SET list.
  static const std::string upd_op_plain =
      std::string(
          "UPDATE ops SET cursor = COALESCE($2, cursor),"
          " error = CASE WHEN $3::boolean THEN $4 ELSE error END,"
          " wake_at_ms = COALESCE($5, wake_at_ms), updated_ms = $6 WHERE id = $1 AND"
          " ($7::bigint = 0 OR epoch = $7) AND ") +
      kRunningIn;
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    int64_t now = now_ms();
    bool created = false;
    for (const Batch* b : batches) {
      b->fenced = false;
      b->refused = base::Status::Ok();
      int64_t epoch = 0;
      if (b->create) {
        // Checked first: a refused create leaves nothing of its batch behind.
        b->refused = insert_op(*b->create);
        if (!b->refused.ok()) {
          b->fenced = true;
          continue;
        }
        created = true;
      }
      for (const auto& o : b->ops) {
        std::optional<std::string> cursor;
        if (o.cursor)
          cursor = sealer_.sealed_text(*o.cursor, "op/" + o.op_id + "/cursor");
        std::optional<std::string> wake;
        if (o.wake_at_ms)
          wake = std::to_string(*o.wake_at_ms);
        int64_t n;
        if (o.state || o.owner) {
          std::optional<std::string> state;
          if (o.state)
            state = std::string(to_string(*o.state));
          n = w_.run(upd_op, {o.op_id, state, cursor, o.set_error ? "t" : "f",
                              text_or_null(o.error), wake, o.owner, now, o.epoch})
                  .affected();
        } else {
          n = w_.run(upd_op_plain, {o.op_id, cursor, o.set_error ? "t" : "f", text_or_null(o.error),
                                    wake, now, o.epoch})
                  .affected();
        }
        epoch = o.epoch;
        if (n != 1) {
          // Fencing: an operation that is no longer active (an operator forced it to
          // FAILED), or no longer held under this epoch (its daemon's lease ran out and
          // another daemon claimed it), takes no write from this executor; the rest of the
          // group commits.
          if (w_.run("SELECT 1 FROM ops WHERE id = $1", {o.op_id}).rows() == 0)
            throw std::runtime_error("no operation " + o.op_id);
          b->fenced = true;
        }
      }
      if (b->fenced)
        continue;
      for (const auto& e : b->events) {
        w_.run(
            "INSERT INTO events(op_id, seq, at_ms, kind, state, item, attempt, key, data,"
            " owner, epoch, started_ms) VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            {e.op_id, e.seq, e.at_ms, e.kind, text_or_null(e.state),
             e.item >= 0 ? PgArg(e.item) : PgArg(std::nullopt), e.attempt, text_or_null(e.key),
             e.data.is_null() ? PgArg(std::nullopt) : PgArg(json::serialize(e.data)),
             text_or_null(daemon_), epoch,
             e.started_ms > 0 ? PgArg(e.started_ms) : PgArg(std::nullopt)});
      }
      for (const auto& o : b->outputs) {
        w_.run(
            "INSERT INTO outputs(op_id, state, value) VALUES($1, $2, $3)"
            " ON CONFLICT (op_id, state) DO UPDATE SET value = EXCLUDED.value",
            {o.op_id, o.state, sealer_.sealed_output(o)});
      }
      for (const auto& i : b->instances) {
        w_.run("UPDATE instances SET instantiation_state = $2, record = $3 WHERE id = $1",
               {i.instance_id, i.instantiation_state,
                sealer_.sealed_text(i.record, "instance/" + i.instance_id)});
      }
    }
    if (created || settles_op(batches))
      notify(w_, kChangeChannel);
    return base::Status::Ok();
  });
}

// The executor's group commit: each statement takes the whole group (one round trip per
// table, not per row). A group that writes one operation twice, or only one, or creates
// one, goes row by row (apply_rows): the same rules, the same result.
base::Status PgStore::apply(const std::vector<const Batch*>& batches) {
  static const std::string upd =
      std::string(
          "UPDATE ops SET state = COALESCE(v.state, ops.state),"
          " cursor = COALESCE(v.cursor, ops.cursor),"
          " error = CASE WHEN v.set_error THEN v.error ELSE ops.error END,"
          " wake_at_ms = COALESCE(v.wake, ops.wake_at_ms), owner = COALESCE(v.owner, ops.owner),"
          " updated_ms = $9 FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[],"
          " $5::text[], $6::bigint[], $7::text[], $8::bigint[])"
          " AS v(id, state, cursor, set_error, error, wake, owner, epoch)"
          " WHERE ops.id = v.id AND (v.epoch = 0 OR ops.epoch = v.epoch) AND ops.") +
      kRunningIn + " RETURNING ops.id";
  static const std::string ins_events =
      "INSERT INTO events(op_id, seq, at_ms, kind, state, item, attempt, key, data, owner, epoch,"
      " started_ms) SELECT v.op_id, v.seq, v.at_ms, v.kind, v.state, v.item, v.attempt, v.key,"
      " v.data, $11, v.epoch, v.started FROM unnest($1::text[], $2::bigint[], $3::bigint[],"
      " $4::text[], $5::text[], $6::int[], $7::int[], $8::text[], $9::text[], $10::bigint[],"
      " $12::bigint[]) AS v(op_id, seq, at_ms, kind, state, item, attempt, key, data, epoch,"
      " started)";
  static const std::string ins_outputs =
      "INSERT INTO outputs(op_id, state, value) SELECT * FROM unnest($1::text[], $2::text[],"
      " $3::text[]) ON CONFLICT (op_id, state) DO UPDATE SET value = EXCLUDED.value";
  using Col = std::vector<std::optional<std::string>>;
  auto num = [](int64_t v) { return std::optional<std::string>(std::to_string(v)); };
  std::unordered_set<std::string> seen;
  size_t writes = 0;
  bool twice = false;
  bool creates = false;
  for (const Batch* b : batches) {
    creates = creates || b->create.has_value();
    for (const auto& o : b->ops) {
      ++writes;
      twice = twice || !seen.insert(o.op_id).second;
    }
  }
  if (twice || writes <= 1 || creates)  // a create is checked, and may be refused, row by row
    return apply_rows(batches);
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    Col id, state, cursor, set_error, error, wake, owner, epoch;
    for (const Batch* b : batches) {
      for (const auto& o : b->ops) {
        id.emplace_back(o.op_id);
        state.push_back(o.state ? std::optional<std::string>(std::string(to_string(*o.state)))
                                : std::nullopt);
        cursor.push_back(o.cursor ? std::optional<std::string>(
                                        sealer_.sealed_text(*o.cursor, "op/" + o.op_id + "/cursor"))
                                  : std::nullopt);
        set_error.emplace_back(o.set_error ? "t" : "f");
        error.push_back(o.error.empty() ? std::nullopt : std::optional<std::string>(o.error));
        wake.push_back(o.wake_at_ms ? num(*o.wake_at_ms) : std::nullopt);
        owner.push_back(o.owner);
        epoch.push_back(num(o.epoch));
      }
    }
    auto q =
        w_.run(upd, {pg_array(id), pg_array(state), pg_array(cursor), pg_array(set_error),
                     pg_array(error), pg_array(wake), pg_array(owner), pg_array(epoch), now_ms()});
    std::unordered_set<std::string> hit;
    for (int i = 0; i < q.rows(); ++i)
      hit.insert(q.text(i, 0));
    // Fencing, as in apply_rows: a batch whose operation is no longer active, or no longer
    // held under its epoch, is not written; the rest of the group is.
    Col missing;
    for (const Batch* b : batches) {
      b->fenced = false;
      for (const auto& o : b->ops) {
        if (!hit.count(o.op_id)) {
          b->fenced = true;
          missing.emplace_back(o.op_id);
        }
      }
    }
    if (!missing.empty() &&
        w_.run("SELECT count(*) FROM ops WHERE id = ANY($1::text[])", {pg_array(missing)})
                .i64(0, 0) != static_cast<int64_t>(missing.size()))
      throw std::runtime_error("an operation of the group does not exist");
    Col e_op, e_seq, e_at, e_kind, e_state, e_item, e_attempt, e_key, e_data, e_epoch, e_started;
    Col o_op, o_state, o_value;
    std::unordered_set<std::string> output_keys;
    for (const Batch* b : batches) {
      if (b->fenced)
        continue;
      int64_t batch_epoch = b->ops.empty() ? 0 : b->ops.back().epoch;
      for (const auto& e : b->events) {
        e_op.emplace_back(e.op_id);
        e_seq.push_back(num(e.seq));
        e_at.push_back(num(e.at_ms));
        e_kind.emplace_back(e.kind);
        e_state.push_back(e.state.empty() ? std::nullopt : std::optional<std::string>(e.state));
        e_item.push_back(e.item >= 0 ? num(e.item) : std::nullopt);
        e_attempt.push_back(num(e.attempt));
        e_key.push_back(e.key.empty() ? std::nullopt : std::optional<std::string>(e.key));
        e_data.push_back(e.data.is_null() ? std::nullopt
                                          : std::optional<std::string>(json::serialize(e.data)));
        e_epoch.push_back(num(batch_epoch));
        e_started.push_back(e.started_ms > 0 ? num(e.started_ms) : std::nullopt);
      }
      for (const auto& o : b->outputs) {
        // One row per (operation, state) in one statement: a second write of the same
        // state's outputs in the group replaces the first, as row by row.
        if (!output_keys.insert(o.op_id + '\n' + o.state).second) {
          for (size_t k = 0; k < o_op.size(); ++k) {
            if (*o_op[k] == o.op_id && *o_state[k] == o.state)
              o_value[k] = sealer_.sealed_output(o);
          }
          continue;
        }
        o_op.emplace_back(o.op_id);
        o_state.emplace_back(o.state);
        o_value.emplace_back(sealer_.sealed_output(o));
      }
    }
    if (!e_op.empty())
      w_.run(ins_events,
             {pg_array(e_op), pg_array(e_seq), pg_array(e_at), pg_array(e_kind), pg_array(e_state),
              pg_array(e_item), pg_array(e_attempt), pg_array(e_key), pg_array(e_data),
              pg_array(e_epoch), text_or_null(daemon_), pg_array(e_started)});
    if (!o_op.empty())
      w_.run(ins_outputs, {pg_array(o_op), pg_array(o_state), pg_array(o_value)});
    for (const Batch* b : batches) {
      if (b->fenced)
        continue;
      for (const auto& i : b->instances) {
        w_.run("UPDATE instances SET instantiation_state = $2, record = $3 WHERE id = $1",
               {i.instance_id, i.instantiation_state,
                sealer_.sealed_text(i.record, "instance/" + i.instance_id)});
      }
    }
    if (settles_op(batches))
      notify(w_, kChangeChannel);
    return base::Status::Ok();
  });
}

base::Status PgStore::insert_op(const OpRecord& rec) {
  // The instance's row lock orders concurrent requests for one instance (from any process);
  // ops_one_open stays the last word. An instance deleted since the request was checked
  // fails this operation alone, not (by its foreign key) a group commit it rides in.
  if (w_.run("SELECT 1 FROM instances WHERE id = $1 FOR UPDATE", {rec.instance_id}).rows() == 0)
    return base::Status::NotFound("no VNF instance " + rec.instance_id);
  auto open = w_.run(
      std::string("SELECT id, state, operation FROM ops WHERE instance_id = $1 AND ") + kOpenIn,
      {rec.instance_id});
  if (open.rows() > 0)
    return base::Status::FailedPrecondition(
        "VNF instance " + rec.instance_id + " already has operation " + open.text(0, 0) + " (" +
        open.text(0, 2) + ") in " + open.text(0, 1) + "; one operation at a time per instance");
  w_.run(std::string("INSERT INTO ops(") + kOpColumns +
             ") VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, 0, 0, $10, $10, 0)",
         {rec.id, rec.instance_id, rec.operation, std::string(to_string(rec.state)),
          rec.machine_digest, rec.package_digest,
          sealer_.sealed_text(rec.request, "op/" + rec.id + "/request"),
          rec.error.is_null() ? PgArg(std::nullopt) : PgArg(json::serialize(rec.error)),
          rec.cursor.is_null() ? PgArg(std::nullopt)
                               : PgArg(sealer_.sealed_text(rec.cursor, "op/" + rec.id + "/cursor")),
          rec.created_ms});
  return base::Status::Ok();
}

base::Status PgStore::create_op(const OpRecord& rec) {
  std::lock_guard lock(wmu_);
  return transaction(w_, [&] {
    if (base::Status why = insert_op(rec); !why.ok())
      return why;
    notify(w_, kQueueChannel);
    notify(w_, kChangeChannel);
    return base::Status::Ok();
  });
}

base::Result<OpRecord> PgStore::get_op(std::string_view id) {
  std::lock_guard<std::mutex> lock(rmu_);
  return get_op_on(r_, id);
}

base::Result<std::vector<OpRecord>> PgStore::list_ops(const OpFilter& f) {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<OpRecord> out;
  base::Status s = guard(r_, [&] {
    std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE true";
    std::vector<PgArg> args;
    if (!f.instance_id.empty()) {
      args.emplace_back(f.instance_id);
      sql += " AND instance_id = $" + std::to_string(args.size());
    }
    if (f.state) {
      args.emplace_back(std::string(to_string(*f.state)));
      sql += " AND state = $" + std::to_string(args.size());
    }
    args.emplace_back(static_cast<int64_t>(f.limit));
    sql += " ORDER BY created_ms DESC, id LIMIT $" + std::to_string(args.size());
    auto q = r_.run(sql, args);
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(sealer_.opened(read_op(q, i)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<OpCount>> PgStore::count_ops() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<OpCount> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run("SELECT operation, state, count(*) FROM ops GROUP BY operation, state", {});
    for (int i = 0; i < q.rows(); ++i) {
      auto state = parse_op_state(q.text(i, 1));
      if (state)
        out.push_back({q.text(i, 0), *state, q.i64(i, 2)});
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<OpRecord> PgStore::transition(std::string_view id, const std::vector<OpState>& from,
                                           OpState to, const std::optional<std::string>& error) {
  std::lock_guard lock(wmu_);
  base::Status s = transaction(w_, [&] {
    auto cur = w_.run("SELECT state FROM ops WHERE id = $1 FOR UPDATE", {id});
    if (cur.rows() == 0)
      return base::Status::NotFound("no operation \"" + std::string(id) + "\"");
    std::string state = cur.text(0, 0);
    bool allowed = false;
    std::string list;
    for (OpState f : from) {
      allowed = allowed || state == to_string(f);
      list += (list.empty() ? "" : " or ") + std::string(to_string(f));
    }
    if (!allowed)
      return base::Status::FailedPrecondition("operation " + std::string(id) + " is " + state +
                                              "; this needs " + list);
    w_.run(
        "UPDATE ops SET state = $2, owner = NULL, cancel_requested = 0, updated_ms = $3,"
        " error = CASE WHEN $4::boolean THEN $5 ELSE error END WHERE id = $1",
        {id, std::string(to_string(to)), now_ms(), error ? "t" : "f",
         error && !error->empty() ? PgArg(*error) : PgArg(std::nullopt)});
    notify(w_, kQueueChannel);  // a retry or rollback: work for a daemon
    notify(w_, kChangeChannel);
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  std::lock_guard<std::mutex> rlock(rmu_);
  return get_op_on(r_, id);
}

base::Status PgStore::request_cancel(std::string_view id) {
  std::lock_guard lock(wmu_);
  bool done = false;
  base::Status s = transaction(w_, [&] {
    auto u = w_.run(
        "UPDATE ops SET cancel_requested = 1 WHERE id = $1 AND state IN ('STARTING',"
        " 'PROCESSING')",
        {id});
    done = u.affected() == 1;
    if (done)
      notify(w_, kQueueChannel);  // the daemon reads cancel requests when woken
    return base::Status::Ok();
  });
  if (!s.ok() || done)
    return s;
  auto cur = get_op_on(w_, id);
  if (!cur.ok())
    return cur.status();
  return base::Status::FailedPrecondition(
      "operation " + std::string(id) + " is " + std::string(to_string(cur.value().state)) +
      "; only a STARTING or PROCESSING operation can be cancelled");
}

base::Result<std::vector<OpRecord>> PgStore::runnable(bool all) {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<OpRecord> out;
  base::Status s = guard(r_, [&] {
    std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE ";
    if (!all)
      sql += "owner IS NULL AND ";
    sql += kRunningIn;
    sql += " ORDER BY created_ms, id";
    auto q = r_.run(sql);
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(sealer_.opened(read_op(q, i)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<std::string>> PgStore::cancel_requests() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<std::string> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(std::string("SELECT id FROM ops WHERE cancel_requested = 1 AND ") + kRunningIn);
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(q.text(i, 0));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<json::object> PgStore::outputs(std::string_view op_id) {
  std::lock_guard<std::mutex> lock(rmu_);
  json::object out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run("SELECT state, value FROM outputs WHERE op_id = $1", {op_id});
    for (int i = 0; i < q.rows(); ++i) {
      std::string state = q.text(i, 0);
      out[state] =
          sealer_.open_output(q.text(i, 1), "op/" + std::string(op_id) + "/output/" + state);
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<EventRecord>> PgStore::history(std::string_view op_id) {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<EventRecord> out;
  base::Status s = guard(r_, [&] {
    auto q = r_.run(
        "SELECT op_id, seq, at_ms, kind, state, item, attempt, key, data, started_ms"
        " FROM events WHERE op_id = $1 ORDER BY seq",
        {op_id});
    for (int i = 0; i < q.rows(); ++i) {
      EventRecord e;
      e.op_id = q.text(i, 0);
      e.seq = q.i64(i, 1);
      e.at_ms = q.i64(i, 2);
      e.kind = q.text(i, 3);
      e.state = q.text(i, 4);
      e.item = q.null(i, 5) ? -1 : static_cast<int>(q.i64(i, 5));
      e.attempt = static_cast<int>(q.i64(i, 6));
      e.key = q.text(i, 7);
      e.data = parse_or_null(q.text(i, 8));
      e.started_ms = q.null(i, 9) ? 0 : q.i64(i, 9);
      out.push_back(std::move(e));
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<OpRecord> PgStore::get_op_on(PgConn& conn, std::string_view id) {
  OpRecord out;
  base::Status s = guard(conn, [&] {
    auto q = conn.run(std::string("SELECT ") + kOpColumns + " FROM ops WHERE id = $1", {id});
    if (q.rows() == 0)
      return base::Status::NotFound("no operation \"" + std::string(id) + "\"");
    out = sealer_.opened(read_op(q, 0));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

// ---------------------------------------------------------------------------------------
// Leases. Every time in them is the database server's clock, so the daemons' clocks need
// not agree.

namespace {

constexpr const char* kDbNow = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

// "a, b" -> "t.a, t.b"
std::string qualified(const std::string& table, std::string_view columns) {
  std::string out = table;
  for (char ch : columns) {
    out += ch;
    if (ch == ' ')
      out += table;
  }
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0)
    return "?";
  return buf;
}

}  // namespace

base::Result<Store::Lease> PgStore::register_daemon(const std::string& name, int64_t ttl_ms) {
  if (name.empty() || name.size() > 128)
    return base::Status::InvalidArgument("a daemon's name is 1 to 128 characters");
  if (ttl_ms < 1000 || ttl_ms > 3600000)
    return base::Status::InvalidArgument("a lease lasts 1 s to 1 h");
  Lease lease{name, 0, ttl_ms};
  std::lock_guard lock(wmu_);
  base::Status s = transaction(w_, [&] {
    auto cur = w_.run(std::string("SELECT incarnation, lease_until_ms - ") + kDbNow +
                          ", host, pid FROM daemons WHERE name = $1 FOR UPDATE",
                      {name});
    if (cur.rows() > 0 && cur.i64(0, 1) >= 0)
      return base::Status::FailedPrecondition(
          "a daemon named \"" + name + "\" is running (host " + cur.text(0, 2) + ", pid " +
          cur.text(0, 3) + "; its lease ends in " + std::to_string(cur.i64(0, 1)) +
          " ms): give each daemon its own --name");
    lease.incarnation = cur.rows() > 0 ? cur.i64(0, 0) + 1 : 1;
    w_.run(std::string("INSERT INTO daemons(name, incarnation, lease_until_ms, host, pid,"
                       " started_ms) VALUES($1, $2, ") +
               kDbNow + " + $3, $4, $5, " + kDbNow +
               ") ON CONFLICT (name) DO UPDATE SET incarnation = EXCLUDED.incarnation,"
               " lease_until_ms = EXCLUDED.lease_until_ms, host = EXCLUDED.host,"
               " pid = EXCLUDED.pid, started_ms = EXCLUDED.started_ms",
           {name, lease.incarnation, ttl_ms, host_name(), static_cast<int64_t>(::getpid())});
    put_back(w_, name);  // what an earlier start of this name held
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  daemon_ = name;
  return lease;
}

PgConn& PgStore::side_conn(std::unique_ptr<PgConn>& slot, int64_t limit_ms, bool with_lock) {
  if (!slot) {
    slot = std::make_unique<PgConn>(url_, display_);
    limit_ms = std::max<int64_t>(limit_ms, 100);
    slot->on_connect = [this, limit_ms, with_lock](PgConn& c) {
      if (with_lock && lock_ == DbLock::kDaemon)  // shared: the writer's session holds it too
        take_lock(c);
      c.exec(("SET statement_timeout = " + std::to_string(limit_ms)).c_str());
    };
  }
  return *slot;
}

base::Status PgStore::renew(const Lease& lease) {
  std::lock_guard lock(lease_mu_);
  // A sixth of the TTL: a renewal that timed out leaves time for another (LeaseKeeper
  // tries again after a tenth).
  PgConn& conn = side_conn(lease_conn_, lease.ttl_ms / 6, false);
  bool kept = false;
  base::Status s = guard(conn, [&] {
    kept =
        conn.run(std::string("UPDATE daemons SET lease_until_ms = ") + kDbNow +
                     " + $3 WHERE name = $1 AND incarnation = $2 AND lease_until_ms >= " + kDbNow,
                 {lease.name, lease.incarnation, lease.ttl_ms})
            .affected() == 1;
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  if (!kept)
    return base::Status::Aborted("the lease of daemon \"" + lease.name +
                                 "\" ran out or was replaced; its operations may be another "
                                 "daemon's now");
  return base::Status::Ok();
}

void PgStore::release(const Lease& lease) {
  std::lock_guard lock(wmu_);
  base::Status s = transaction(w_, [&] {
    auto d = w_.run("DELETE FROM daemons WHERE name = $1 AND incarnation = $2",
                    {lease.name, lease.incarnation});
    if (d.affected() == 1)
      put_back(w_, lease.name);  // a drained daemon's
    return base::Status::Ok();
  });
  (void)s;  // best effort: otherwise the lease runs out
}

base::Result<std::vector<OpRecord>> PgStore::claim(const Lease& lease, bool first, size_t limit) {
  (void)first;  // an earlier start's operations were put back by register_daemon
  static const std::string sql =
      std::string("WITH c AS (SELECT o.id FROM ops o WHERE o.") + kRunningIn +
      " AND (o.owner IS NULL OR NOT EXISTS (SELECT 1 FROM daemons d WHERE d.name = o.owner"
      " AND d.lease_until_ms >= " +
      kDbNow +
      ")) ORDER BY o.created_ms, o.id LIMIT $2 FOR UPDATE OF o SKIP LOCKED)"
      " UPDATE ops SET owner = $1, epoch = nextval('op_epochs') FROM c WHERE ops.id = c.id"
      " AND EXISTS (SELECT 1 FROM daemons d WHERE d.name = $1 AND d.incarnation = $3"
      " AND d.lease_until_ms >= " +
      kDbNow + ") RETURNING " + qualified("ops.", kOpColumns);
  std::lock_guard lock(claim_mu_);
  // The database's lock too, as the writer's session: no claim while a key rotation
  // re-seals the operations it would return.
  PgConn& conn = side_conn(claim_conn_, lease.ttl_ms / 3, true);
  std::vector<OpRecord> out;
  base::Status s = guard(conn, [&] {
    auto q = conn.run(sql, {lease.name, static_cast<int64_t>(limit), lease.incarnation});
    for (int i = 0; i < q.rows(); ++i)
      out.push_back(sealer_.opened(read_op(q, i)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) {
    return a.created_ms != b.created_ms ? a.created_ms < b.created_ms : a.id < b.id;
  });
  return out;
}

}  // namespace engine::internal
