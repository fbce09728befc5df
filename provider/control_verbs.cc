// softverbs_control(): the in-process face of the control requests (see
// include/softverbs/control.h). The requests themselves are the emulator's.
#include <cerrno>
#include <cstring>
#include <string>

#include "emulator/control/control_commands.h"
#include "emulator/engine/engine.h"
#include "provider/include/softverbs/control.h"

extern "C" __attribute__((visibility("default"))) int softverbs_control(const char* request,
                                                                       char* reply,
                                                                       size_t reply_size) {
  if (!request) return EINVAL;
  softverbs::Errno err = 0;
  softverbs::Engine* engine = softverbs::Engine::process(err);
  if (!engine) return err ? err : ENODEV;
  std::string answer;
  try {
    answer = softverbs::control::handle_request(*engine, request);
  } catch (...) {
    return ENOMEM;
  }
  int result = answer.rfind("error:", 0) == 0 ? EINVAL : 0;
  if (reply && reply_size) {
    size_t n = std::min(answer.size(), reply_size - 1);
    std::memcpy(reply, answer.data(), n);
    reply[n] = '\0';
    if (n < answer.size() && result == 0) result = ENOSPC;
  }
  return result;
}
