// The registration of each action kind, one function per file that implements them; each
// registers its kinds with their catalog signatures (Registry::standard() calls them all).
#pragma once

#include "actions/actions.h"

namespace actions {

void add_local_exec(Registry& r);        // local_exec.cpp
void add_instance_actions(Registry& r);  // registry.cpp: instance.* (inline)
void add_heat_parameters(Registry& r);   // heat.cpp: heat.parameters (inline)
// heat.cpp: heat.stack.*, heat.resources, heat.resource.mark_unhealthy (and
// heat.parameters); their OpenStack sessions talk through `services`.
void add_heat_actions(Registry& r, const Services& services);
void add_ssh_actions(Registry& r);  // ssh.cpp: ssh.exec, ssh.put, ssh.get
// http_request.cpp: http.request, through `services` (transport, http_allow).
void add_http_actions(Registry& r, const Services& services);

}  // namespace actions
