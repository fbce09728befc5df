#include "harness/testsupport/errors.h"

#include <cerrno>
#include <cstring>

namespace softverbs::testsupport {
namespace {

const char* errno_name(Errno err) {
  switch (err) {
    case 0: return "OK";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case EPIPE: return "EPIPE";
    case ERANGE: return "ERANGE";
    case ENOSYS: return "ENOSYS";
    case EPROTO: return "EPROTO";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ECONNRESET: return "ECONNRESET";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECANCELED: return "ECANCELED";
    default: return nullptr;
  }
}

}  // namespace

std::string describe_errno(Errno err) {
  const char* name = errno_name(err);
  std::string text = name ? name : "errno " + std::to_string(err);
  if (err != 0) text += std::string(" (") + std::strerror(err) + ")";
  return text;
}

}  // namespace softverbs::testsupport
