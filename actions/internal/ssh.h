// SSH and SFTP actions (ssh.exec, ssh.put, ssh.get) on libssh; see ssh.cpp.
#pragma once

#include <cstddef>

#include "actions/actions.h"

namespace actions {

// The pool of idle sessions (tests: a pooled session is reused; dropped on demand).
size_t ssh_pooled_sessions();
void ssh_drop_pooled_sessions();

}  // namespace actions
