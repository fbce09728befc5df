// ibv_read_sysfs_file: served for paths below a soft device's directories.
#include <string>
#include <string_view>

#include "provider/device_list.h"
#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/sysfs_files.h"

namespace softverbs::provider {
namespace {

// `path` relative to `dir` when it lies below it.
bool below(std::string_view path, std::string_view dir, std::string_view& relative) {
  if (path.size() <= dir.size() + 1 || path.substr(0, dir.size()) != dir ||
      path[dir.size()] != '/')
    return false;
  relative = path.substr(dir.size() + 1);
  return true;
}

// dir + "/" + file with repeated and trailing slashes folded, as the kernel
// resolves them.
std::string join(const char* dir, const char* file) {
  std::string path;
  for (const char* part : {dir, "/", file}) {
    for (const char* c = part; *c; ++c) {
      if (*c == '/' && !path.empty() && path.back() == '/') continue;
      path += *c;
    }
  }
  return path;
}

}  // namespace
}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf,
                                         size_t size) {
  if (!dir || !file || (!buf && size)) {
    errno = EINVAL;
    return -1;
  }
  return errno_on_exception(
      [&]() -> int {
        const std::string path = join(dir, file);
        for (SoftDevice& device : soft_devices()) {
          std::string_view relative;
          softverbs::Errno err;
          std::string content;
          if (below(path, device.ibv.ibdev_path, relative))
            err = ibdev_sysfs_file(device.description, relative, content);
          else if (below(path, device.ibv.dev_path, relative))
            err = uverbs_sysfs_file(device.description, relative, content);
          else
            continue;
          if (err) {
            errno = err;
            return -1;
          }
          return copy_sysfs_content(content, buf, size);
        }
        SOFTVERBS_FORWARD(-1, ibv_read_sysfs_file, dir, file, buf, size);
      },
      -1);
}
