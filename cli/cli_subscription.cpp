// vnflow subscription list|show|delete: the notification subscriptions NFVOs made through the
// REST API, and where each one's delivery stands (docs/notifications.md). Authentication
// secrets are never printed.
#include <iostream>

#include <boost/json.hpp>

#include "cli/cli_internal.h"
#include "engine/engine.h"

namespace vnflow_cli {

namespace json = boost::json;

namespace {

constexpr const char* kSubscriptionCommon =
    "  --db FILE     the database, else $VNFLOW_DB, else ~/.local/share/vnflow/vnflow.db\n"
    "  --json        the record as JSON\n";

std::string state_word(const engine::SubscriptionRecord& s) {
  if (s.failing)
    return "FAILING";
  return s.attempts > 0 ? "RETRYING" : "OK";
}

}  // namespace

const std::vector<CommandSpec>& subscription_commands() {
  static const std::vector<CommandSpec> specs = {
      {"subscription list",
       std::string("usage: vnflow subscription list [--db FILE] [--json]\n\n"
                   "One line a subscription: id, API, delivery (OK, RETRYING, FAILING),\n"
                   "notices not yet passed, callback URI.\n\n") +
           kSubscriptionCommon,
       {"--db"},
       {"--json"},
       0,
       0},
      {"subscription show",
       std::string("usage: vnflow subscription show ID [--db FILE] [--json]\n\n"
                   "The subscription (its filter, callback, authentication type) and its\n"
                   "delivery: delivered, backlog, failed attempts, the last error.\n\n") +
           kSubscriptionCommon,
       {"--db"},
       {"--json"},
       1,
       1},
      {"subscription delete",
       std::string("usage: vnflow subscription delete ID [--db FILE] [--json]\n\n"
                   "Deletes it: its notifications not yet delivered are not sent.\n\n") +
           kSubscriptionCommon,
       {"--db"},
       {"--json"},
       1,
       1},
  };
  return specs;
}

int cmd_subscription(const CommandSpec& spec, const Opts& o, engine::Store& store) {
  const std::string sub = spec.words.substr(std::string("subscription ").size());
  bool as_json = o.flags.count("--json") > 0;
  if (sub == "list") {
    auto list = store.list_subscriptions(false);
    if (!list.ok())
      return fail(list.status());
    json::array arr;
    for (const auto& s : list.value()) {
      if (as_json) {
        arr.push_back(engine::subscription_status_view(s));
        continue;
      }
      std::cout << printable(s.id) << "  " << printable(s.api) << "  " << state_word(s) << "  "
                << s.backlog << "  " << printable(s.callback_uri) << "\n";
    }
    if (as_json)
      std::cout << json_text(arr) << "\n";
    return 0;
  }
  auto s = sub == "show" ? store.get_subscription(o.pos[0], false)
                         : engine::delete_subscription(store, o.pos[0]);
  if (!s.ok())
    return fail(s.status());
  if (sub == "delete") {
    if (as_json)
      std::cout << json_text(json::object{{"id", s.value().id}}) << "\n";
    else
      std::cout << printable(s.value().id) << "\n";
    return 0;
  }
  json::object view = engine::subscription_status_view(s.value());
  if (as_json) {
    std::cout << json_text(view) << "\n";
    return 0;
  }
  const auto& d = view.at("delivery").as_object();
  std::cout << "id:        " << printable(s.value().id)
            << "\napi:       " << printable(s.value().api)
            << "\ncallback:  " << printable(s.value().callback_uri)
            << "\ncreated:   " << printable(std::string(view.at("createdAt").as_string()))
            << "\ndelivery:  " << state_word(s.value()) << ", " << s.value().delivered
            << " delivered, " << s.value().backlog << " notices not yet passed\n";
  for (const char* k : {"lastDeliveredAt", "failingSince", "nextAttemptAt", "lastError"}) {
    if (const json::value* v = d.if_contains(k))
      std::cout << "  " << k << ": "
                << printable(v->is_string() ? std::string(v->get_string()) : json::serialize(*v))
                << "\n";
  }
  if (const json::value* a = view.if_contains("authentication"))
    std::cout << "authentication: " << printable(json::serialize(*a)) << "\n";
  if (const json::value* f = view.if_contains("filter"))
    std::cout << "filter:    " << printable(json::serialize(*f)) << "\n";
  return 0;
}

}  // namespace vnflow_cli
