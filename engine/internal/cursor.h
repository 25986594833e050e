// The executor's position in one operation, stored as JSON in ops.cursor and rewritten by
// every commit of the operation.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "base/base.h"

namespace engine {

namespace json = boost::json;

enum class ItemStatus : uint8_t {
  kPending = 0,
  kDispatched = 1,
  kDone = 2,
  kFailed = 3,
  kWaiting = 4
};

// One action call of the current state (one per fan-out item).
struct Item {
  ItemStatus status = ItemStatus::kPending;
  int attempt = 1;
  json::value inputs;                   // while dispatched: what the action was given
  json::value outputs;                  // when done
  int64_t wake_ms = 0;                  // when waiting: the durable timer
  std::optional<base::ErrorClass> cls;  // when failed
  std::string msg;                      // when failed
  int redispatches = 0;                 // times re-dispatched after the daemon stopped while it ran
  bool secret = false;                  // the outputs are a secret (secret_output): sealed at rest
};

// A finished action of a state with a compensation, for rollback.
struct Done {
  int state = 0;
  int item = 0;
  json::value outputs;
  json::value value;  // the fan-out item
  bool secret = false;
  int visit = 1;       // the visit of the state it finished in (its compensation's key)
  json::value inputs;  // in a called workflow: the inputs of its call (null elsewhere)
};

// A workflow call in progress (a `call` state): which item of its list runs, with what
// inputs, and what the finished items returned. Innermost last in Cursor::frames.
struct Frame {
  int call = 0;          // the call state
  json::array values;    // for_each: the items; else one null
  int64_t index = 0;     // the item running
  json::value inputs;    // the called workflow's inputs for that item
  json::array results;   // what the items before it returned
  bool running = false;  // the item's workflow was entered (its inputs are set)
};

struct Cursor {
  int cur = 0;
  bool started = false;
  json::array values;  // fan-out items of the current state (evaluated once)
  std::vector<Item> items;
  std::vector<Done> done;
  std::vector<Frame> frames;
  bool rb_started = false;
  int rb = -1;
  Item rb_item;
  int64_t seq = 0;  // last event number
  // Visits so far of the states on a cycle (a loop comes back to them); the current state's
  // entry is the visit in progress. States off every cycle are visited once.
  std::map<int, int> visits;
  std::vector<std::string> secret_states;  // states whose outputs are secret
  // States whose outputs hold secrets at these paths only (an action's secret_fields): on a
  // resume the run learns the values there, not every string of the outputs.
  std::map<std::string, std::vector<std::string>> secret_paths;
  // Once an operation holds a secret output, later inputs and outputs may carry it: the
  // items, fan-out values and finished states are then stored under one secret-named key,
  // so the store seals them whole.
  bool seal_body = false;
  // The instance's VNFCs when the operation began processing ({id, vduId, resourceId} each;
  // has_vnfcs0 false for an operation begun before vnflow kept them), and the resource
  // changes from them found when it last settled (SOL003 resourceChanges: affectedVnfcs).
  bool has_vnfcs0 = false;
  json::array vnfcs0;
  json::object changes;
  json::object outputs;  // in memory; stored in the outputs table, not in to_json()

  json::value to_json() const;
  static base::Result<Cursor> from_json(const json::value& v);
};

}  // namespace engine
