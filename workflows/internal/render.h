// What the renderers of a machine share (machine.cpp: text, dot, mermaid, seqdiag, json;
// plantuml.cpp: PlantUML; reach.cpp: what a flavour can reach).
#pragma once

#include <string>
#include <vector>

#include "workflows/workflows.h"

namespace workflows {

// Who a state's action talks to, as the diagrams name it: "vnflow host" (local.exec),
// "VnfInstance (vnflow DB)" (instance.*), "VIM registry", or the catalog's participant
// (Heat, VMs, HTTP); "vnflow" for a state that is not an action.
std::string participant_of(const State& s);

// The states an operation of the machine's flavour can reach (`reach`, by index), and for
// each choice whose conditions read only the VNFD the one state it goes to (`fixed`; -1:
// any branch may be taken, or not a choice).
struct FlavourReach {
  std::vector<bool> reach;
  std::vector<int> fixed;
};
FlavourReach flavour_reach(const Machine& m);

// The machine as a PlantUML sequence diagram, in the seeds' form.
std::string render_plantuml(const Machine& m);

}  // namespace workflows
