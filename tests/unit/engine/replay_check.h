// Every history the engine tests produce must replay through the stepper to the same
// events (issue 14's acceptance): a Fixture calls this when it ends.
#pragma once

#include <exception>
#include <string>

#include <catch2/catch.hpp>

#include "engine/engine.h"

namespace vnflow_test {

inline void check_every_history_replays(engine::Store& store, int max_redispatch = -1) {
  if (std::uncaught_exceptions() > 0)
    return;  // the test failed already
  engine::OpFilter all;
  all.limit = 100000;
  auto ops = store.list_ops(all);
  if (!ops.ok())
    return;  // a test that broke its store on purpose
  for (const auto& op : ops.value()) {
    auto m = engine::operation_machine(store, op);
    if (!m.ok())
      continue;  // a test that stored no machine on purpose
    auto rep = engine::replay_dry_run(store, op, *m.value(), max_redispatch);
    INFO("operation " + op.id + " (" + op.operation + ", " +
         std::string(engine::to_string(op.state)) + ")");
    REQUIRE(rep.ok());
    INFO(rep.value().divergence);
    CHECK_FALSE(rep.value().diverged);
  }
}

}  // namespace vnflow_test
