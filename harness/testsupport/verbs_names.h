// Readable names of verbs values, for test failure messages.
#pragma once

#include <infiniband/verbs.h>

namespace softverbs::testsupport {

// "RESET", "INIT", ... "ERR"; "UNKNOWN" for anything else.
const char* qp_state_name(ibv_qp_state state);

}  // namespace softverbs::testsupport
