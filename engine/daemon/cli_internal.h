// Command handlers of the vnflow CLI, one file per command group.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/base.h"

namespace engine {
class Store;
}

namespace vnflow_cli {

int cmd_workflow(const std::vector<std::string>& argv);  // cli_workflow.cpp
int cmd_engine(
    const std::vector<std::string>& argv);  // cli_engine.cpp: package, instance, op, daemon
// cli_vim.cpp: vim register|list|show|delete (called by cmd_engine with parsed options)
int cmd_vim(const std::vector<std::string>& argv, const std::map<std::string, std::string>& kv,
            const std::set<std::string>& flags, const std::vector<std::string>& pos,
            engine::Store& store);
int fail(const base::Status& s);

}  // namespace vnflow_cli
