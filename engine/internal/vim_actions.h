// vim.register / vim.deregister: workflow actions on the VIM registry (engine-internal).
//
// They write the Store, so they live in engine/, not actions/. The executor runs them
// inline, like the instance-record actions, and commits the instance record they change
// (its vim_connection_info list) with the state's result. The registry write itself is an
// upsert by an id derived from (instance, name), so a re-run after a crash writes the same
// row again instead of a second VIM.
#pragma once

#include <string_view>

#include <boost/json/value.hpp>

#include "actions/actions.h"
#include "engine/engine.h"

namespace engine {

// Registers vim.register and vim.deregister (inline, with their catalog signatures) over
// `store`; null for replay (only the record changes).
void add_vim_actions(actions::Registry& registry, Store* store);

// Runs vim.register or vim.deregister for the instance whose record is `record` and
// updates record.vim_connection_info. `store` may be null (replay): then only the record
// changes.
actions::Outcome run_vim_action(Store* store, std::string_view name,
                                const boost::json::object& inputs, boost::json::value& record);

}  // namespace engine
