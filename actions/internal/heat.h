// heat: the heat.* actions and the pure helpers behind them (unit-tested directly).
#pragma once

#include <boost/json.hpp>

#include "actions/actions.h"

namespace actions {

// From Heat's `resources?nested_depth=N&with_detail=true` list: {resources: [{name, type,
// status, physical_id, stack}], vnfcs: [{id, vdu, resource_id, stack_id, addresses{cp: ip},
// address}]}. A VNFC is a resource named like a VDU of `vdus`; its addresses come from
// the CPs of `cps` ({cp: {vdu}}) bound to that VDU in the same (member) stack.
json::object heat_inventory(const json::array& resources, const json::object& vdus,
                            const json::object& cps);

// heat.parameters (pure, run inline): the BaseHOT `nfv` parameter of SOL001 VNFD facts:
// VDU.<vdu>.{flavor, image, desired_capacity} and CP.<cp>.network, then
// `overrides` merged over it (request.additionalParams.nfv).
Outcome heat_parameters(const json::object& inputs);

}  // namespace actions
