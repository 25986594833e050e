// Secrets at rest, for every Store (SQLite, PostgreSQL): one set of sealing rules.
//
// Requests, instance records, cursors and state outputs are JSON; a field whose name says it
// holds a secret (actions::is_secret_name: password, token, private_key..., in any letter
// case) is stored sealed (AES-256-GCM, the store's key file) and opened again when read. The
// executor and the workflows see plain values; the database never holds them.
//
//   "vnflow-sealed:s1:<sealed>"  a string value
//   "vnflow-sealed:j1:<sealed>"  any other value (a map, a list, a number), as JSON text
//   "vnflow-sealed:v1:..."       written by vnflow before owners were bound (read only)
//
// Each sealed value is bound to its owner and place (the associated data is e.g.
// "op/<id>/request#/vimConnectionInfo/0/accessInfo/password"): copied into another record
// or another field, it no longer opens. A value that does not open is left sealed, and the
// executor never hands a sealed value to an action.
//
// A Sealer holds one store's key. The store keeps the check value (meta.key_check) and asks
// settle() at open whether the key file fits the database.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "base/base.h"
#include "engine/engine.h"

namespace engine::internal {

inline constexpr std::string_view kSealedPrefix = "vnflow-sealed:";

// True when `p` holds for a string anywhere in `v`.
bool any_string(const json::value& v, const std::function<bool(std::string_view)>& p);
// True when `v` holds a sealed value ("vnflow-sealed:..."): one the store could not open
// is never handed to an action.
bool has_sealed(const json::value& v);

// Where a store keeps sealed JSON texts: `value` of `table`, the row named by `key` (an SQL
// expression both dialects read alike), each value bound to owner_prefix + key +
// owner_suffix. VIM records are sealed whole, with their id (Sealer::seal_vim).
struct SealedColumn {
  const char* table;
  const char* key;
  const char* value;
  const char* owner_prefix;
  const char* owner_suffix;
};
const std::vector<SealedColumn>& sealed_columns();
// One row, one column, true (non-zero) when the database holds a sealed value (a VIM, or a
// sealed text in one of sealed_columns()).
std::string has_sealed_sql();

// A column's JSON text parsed; null when empty or not JSON.
json::value parse_or_null(const std::string& s);
// The same when it is an object, else an empty object.
json::object object_or_empty(const std::string& s);
// A subscription's authentication types (SubscriptionRecord::auth's authType) as JSON text:
// kept in clear beside the sealed authentication, for views.
std::string subscription_auth_types(const json::object& auth);

class Sealer {
 public:
  explicit Sealer(std::string key_path) : key_path_(std::move(key_path)) {}

  const std::string& key_path() const { return key_path_; }

  // At open: `stored_check` is the database's check value ("" when it has none),
  // `has_sealed_data` tells whether it holds sealed values. A database that has sealed
  // anything refuses a missing key file (no new key is made for it) and a key that does not
  // open its check value; an interrupted rotation is finished or forgotten. Returns the check
  // value the store must record when it had none, else "".
  base::Result<std::string> settle(const std::string& stored_check,
                                   const std::function<bool()>& has_sealed_data);

  // The key settle() accepted.
  base::Result<std::string> key();

  // JSON text as stored: secret fields sealed, bound to `owner`. Throws (the write fails)
  // when sealing is impossible, rather than storing a secret in clear.
  std::string sealed_text(const std::string& text, const std::string& owner);
  std::string sealed_text(const json::value& v, const std::string& owner);
  // A whole value sealed (a secret output): "vnflow-sealed:j1:..." as the column's text.
  std::string sealed_whole(const std::string& json_text, const std::string& owner);
  // Opens the sealed values of a value read back; one that does not open stays sealed.
  void open_fields(json::value& v, const std::string& owner);
  // A stored output (sealed whole, or with sealed fields) read back.
  json::value open_output(const std::string& text, const std::string& owner);
  // A finished state's outputs as stored: sealed whole when secret, else with secret fields
  // sealed; bound to "op/<id>/output/<state>".
  std::string sealed_output(const Batch::OutputWrite& o);
  OpRecord opened(OpRecord r);
  InstanceRecord opened(InstanceRecord r);
  // A subscription's authentication sealed whole, bound to "subscription/<id>/auth" ("" when
  // it has none); and read back: `r.auth` becomes its types alone, or with `open` the whole
  // authentication (kFailedPrecondition when it does not open with the key).
  std::string seal_subscription_auth(const SubscriptionRecord& s);
  base::Status read_subscription_auth(SubscriptionRecord& r, const std::string& types,
                                      const std::string& sealed, bool open);
  // A VIM's access data, sealed whole with the VIM's id as associated data.
  base::Result<std::string> seal_vim(const json::object& access, const std::string& id);
  base::Result<json::object> open_vim(const std::string& sealed, const std::string& id);

  // Key rotation, around the store's own transaction: begin_rotation() writes the new key to
  // "<key>.new"; reseal_* give each stored value sealed with it (or a FailedPrecondition
  // naming what does not open with the current key); the store commits, then calls
  // finish_rotation() (renames the key into place), or abort_rotation() when it rolled back.
  base::Status begin_rotation();
  base::Status reseal_text(const std::string& text, const std::string& owner, std::string& out);
  base::Status reseal_vim(const std::string& sealed, const std::string& id, std::string& out);
  base::Result<std::string> next_check();
  // The rotation of every sealed_columns() text: `select(sql)` returns the (key, text) rows
  // of a query, `update(sql, key, text)` runs an update; `param(n)` spells the n-th
  // parameter in the store's dialect (?n, $n).
  base::Status reseal_columns(
      const std::function<std::string(int)>& param,
      const std::function<std::vector<std::pair<std::string, std::string>>(const std::string&)>&
          select,
      const std::function<void(const std::string&, const std::string&, const std::string&)>&
          update);
  base::Status finish_rotation();
  void abort_rotation();

 private:
  std::string key_path_;
  std::mutex mu_;
  std::string key_;
  std::string next_;  // during a rotation
};

}  // namespace engine::internal
