// The vnflow command line, callable in-process (tests drive it without a subprocess).
#pragma once

#include <string>
#include <vector>

namespace vnflow_cli {

// Runs one command line (argv[0] is the program name) and returns the exit status.
int run(const std::vector<std::string>& argv);

}  // namespace vnflow_cli
