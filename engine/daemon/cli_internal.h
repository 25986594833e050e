// Command handlers of the vnflow CLI, one file per command group.
#pragma once

#include <string>
#include <vector>

namespace vnflow_cli {

int cmd_workflow(const std::vector<std::string>& argv);  // cli_workflow.cpp

}  // namespace vnflow_cli
