#include "harness/cli/tmpfs_cover.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace softverbs::cli {
namespace {

std::string describe(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

struct Entry {
  std::string name;
  mode_t type;
};

// The entries of the directory open as `fd` (a readable directory fd).
std::vector<Entry> list_entries(int fd) {
  std::vector<Entry> entries;
  const int own = ::dup(fd);
  if (own < 0) return entries;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(own), ::closedir);
  if (!dir) {
    ::close(own);
    return entries;
  }
  while (const dirent* item = ::readdir(dir.get())) {
    const std::string name = item->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      entries.push_back({name, static_cast<mode_t>(st.st_mode & S_IFMT)});
  }
  return entries;
}

// An empty directory or file to bind-mount on.
bool make_mountpoint(const std::string& path, bool directory) {
  if (directory) return ::mkdir(path.c_str(), 0755) == 0;
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Puts `entry` of the old directory (open as `from`) back at `to`/name.
std::string restore_entry(int from, const Entry& entry, const std::string& to) {
  const std::string target = to + "/" + entry.name;
  if (entry.type == S_IFLNK) {
    char link[4096];
    const ssize_t length = ::readlinkat(from, entry.name.c_str(), link, sizeof(link) - 1);
    if (length < 0) return describe("reading the link " + target);
    link[length] = '\0';
    return ::symlink(link, target.c_str()) == 0 ? "" : describe("making the link " + target);
  }
  if (!make_mountpoint(target, entry.type == S_IFDIR)) return describe("making " + target);
  const std::string source = "/proc/self/fd/" + std::to_string(from) + "/" + entry.name;
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    if (errno == ENOENT) return {};  // gone meanwhile
    return describe("bind-mounting the old " + target);
  }
  return {};
}

// Puts every entry of `from` back into `to`, but those `drop` rejects;
// `open_subdir` (when not empty) is rebuilt as a real directory whose own
// entries pass `drop_in_subdir`.
std::string restore_all(int from, const std::string& to, EntryFilter drop,
                        const std::string& open_subdir, EntryFilter drop_in_subdir) {
  bool subdir_seen = false;
  for (const Entry& entry : list_entries(from)) {
    if (drop && drop(entry.name, entry.type)) continue;
    if (!open_subdir.empty() && entry.name == open_subdir && entry.type == S_IFDIR) {
      subdir_seen = true;
      const std::string subdir = to + "/" + open_subdir;
      const int old = ::openat(from, open_subdir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (old < 0) return describe("opening the old " + subdir);
      std::string problem = ::mkdir(subdir.c_str(), 0755) == 0
                                ? restore_all(old, subdir, drop_in_subdir, "", nullptr)
                                : describe("making " + subdir);
      ::close(old);
      if (!problem.empty()) return problem;
      continue;
    }
    if (std::string problem = restore_entry(from, entry, to); !problem.empty()) return problem;
  }
  if (!open_subdir.empty() && !subdir_seen) {
    const std::string subdir = to + "/" + open_subdir;
    if (::mkdir(subdir.c_str(), 0755) != 0) return describe("making " + subdir);
  }
  return {};
}

}  // namespace

std::string cover_with_tmpfs(const std::string& dir, const std::string& open_subdir,
                             EntryFilter drop) {
  const int old = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (old < 0) return describe("opening " + dir);
  std::string problem;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=4m") !=
      0) {
    problem = describe("mounting a tmpfs on " + dir);
  } else {
    // The cover's own level is put back whole; `drop` acts in the subdirectory.
    problem = restore_all(old, dir, nullptr, open_subdir, drop);
    if (!problem.empty()) ::umount2(dir.c_str(), MNT_DETACH);
  }
  ::close(old);
  return problem;
}

std::string seal_cover(const std::string& dir) {
  if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0)
    return describe("making the tmpfs on " + dir + " read-only");
  return {};
}

}  // namespace softverbs::cli
