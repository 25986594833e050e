// What the command files of the engine share (engine-internal).
#pragma once

#include <cstddef>
#include <string>

#include "base/base.h"
#include "engine/engine.h"

namespace engine {

constexpr size_t kMaxNameBytes = 255;

// Names and descriptions are shown on terminals and in lists: bounded, UTF-8, and free of
// control characters (an ANSI escape in a name would rewrite an operator's screen).
base::Status check_text(const char* what, const std::string& s, size_t max);

// An operation's error ({state, class, message}) as a SOL ProblemDetails.
json::object op_problem(const json::value& error);

// Whether notice `n` is an operation's result (COMPLETED, FAILED_TEMP, FAILED, ROLLED_BACK:
// notificationStatus RESULT), not its start (STARTING, PROCESSING, ROLLING_BACK).
bool is_result_notice(const NoticeRecord& n);

// SOL003's result members of an operation occurrence, those present: resourceChanges
// (affectedVnfcs, the VNFCs it added, removed or moved since it began, as of when it last
// settled) and changedInfo (what a completed modify_info changed, secrets as "***").
json::object op_results(const OpRecord& op);

// SOL003/SOL005's test of a new subscription's callback: a GET with its authentication that
// must answer 204 (any 2xx is taken). kFailedPrecondition with the reason (notifier.cpp).
base::Status test_callback(const SubscriptionRecord& s, const NotifyOptions& options);

}  // namespace engine
