// Errors as values, the way the verbs API reports them.
#pragma once

#include <string>

namespace softverbs::testsupport {

// 0 on success, else a positive errno (EINVAL, ENOMEM, ETIMEDOUT, ...).
using Errno = int;

// "EINVAL (Invalid argument)" — the symbolic name first, since that is what
// the man pages and the IBTA tables talk about.
std::string describe_errno(Errno err);

}  // namespace softverbs::testsupport
