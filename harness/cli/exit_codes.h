// Exit statuses of the softverbs CLI, shared by every subcommand so scripts
// can tell a misuse from a failure of the program that was run.
#pragma once

namespace softverbs::cli {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
// Wrong command line or bad SOFTVERBS_* environment: nothing was started.
inline constexpr int kExitUsage = 2;
// Same meaning as in a POSIX shell, so `softverbs run -- X` can stand in for `X`.
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

}  // namespace softverbs::cli
