// Command handlers of the vnflow CLI, one file per command group.
#pragma once

#include <string>
#include <vector>

namespace vnflow_cli {

int cmd_workflow(const std::vector<std::string>& argv);  // cli_workflow.cpp
int cmd_engine(
    const std::vector<std::string>& argv);  // cli_engine.cpp: package, instance, op, daemon

}  // namespace vnflow_cli
