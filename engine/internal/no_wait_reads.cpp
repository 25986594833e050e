// NoWaitReads (engine.h): a thread's scope in which a store's reads answer at once or
// decline. One pointer per thread: the innermost scope; a decline marks it.
#include <stdexcept>

#include "engine/engine.h"

namespace engine {

namespace {
thread_local NoWaitReads* current = nullptr;
}  // namespace

NoWaitReads::NoWaitReads() : outer_(current) {
  current = this;
}

NoWaitReads::~NoWaitReads() {
  current = outer_;
  if (declined_ && outer_ != nullptr)
    outer_->declined_ = true;
}

bool NoWaitReads::active() {
  return current != nullptr;
}

void NoWaitReads::decline() {
  if (current == nullptr)
    throw std::logic_error("NoWaitReads::decline() out of a NoWaitReads scope");
  current->declined_ = true;
  throw WouldWait();
}

bool NoWaitReads::mark_declined() {
  if (current == nullptr)
    return false;
  current->declined_ = true;
  return true;
}

bool NoWaitReads::declined() const {
  return declined_;
}

}  // namespace engine
