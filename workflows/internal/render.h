// What the renderers of a machine share (machine.cpp: text, dot, mermaid, seqdiag, json;
// plantuml.cpp: PlantUML).
#pragma once

#include <string>

#include "workflows/workflows.h"

namespace workflows {

// Who a state's action talks to, as the diagrams name it: "vnflow host" (local.exec),
// "VnfInstance (vnflow DB)" (instance.*), "VIM registry", or the catalog's participant
// (Heat, VMs, HTTP); "vnflow" for a state that is not an action.
std::string participant_of(const State& s);

// The machine as a PlantUML sequence diagram, in the seeds' form.
std::string render_plantuml(const Machine& m);

}  // namespace workflows
