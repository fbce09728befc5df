// A fault plan: which packets the fault injector (fault_injector.h) drops,
// duplicates, reorders, delays or corrupts, which SENDs the responder
// answers with an RNR NAK as if no receive were posted, and the seed that
// makes a run replayable. Plans are written as text (docs/faults.md) in the environment,
// in a file, or through `softverbs fault`; parse_plan() and to_string() are
// the two directions of that text form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace softverbs::fault {

// kRnr is not done to a frame: the responder asks the plan when a SEND
// arrives in sequence (FaultInjector::answers_with_rnr).
enum class Action : uint8_t { kDrop, kDuplicate, kReorder, kDelay, kCorrupt, kRnr };

// kTx: frames this process sends; kRx: frames it receives.
enum class Direction : uint8_t { kBoth, kTx, kRx };

struct Rule {
  Action action;
  Direction direction = Direction::kBoth;
  std::optional<uint32_t> qpn = std::nullopt;   // BTH destination QP to match
  std::optional<uint8_t> opcode = std::nullopt;  // BTH opcode to match
  double probability = 1.0;           // per matching packet, 0..1
  uint64_t nth = 0;                   // if non-zero: only the nth matching packet (1-based)
  uint64_t limit = 0;                 // if non-zero: at most this many injections
  uint64_t delay_ns = 0, jitter_ns = 0;  // kDelay: held delay_ns + uniform [0, jitter_ns]
  uint32_t reorder_depth = 1;         // kReorder: held back until this many later frames passed

  bool operator==(const Rule&) const = default;
};

struct Plan {
  uint64_t seed = 1;
  std::vector<Rule> rules = {};

  bool operator==(const Plan&) const = default;
};

// The longest delay or jitter a plan may ask for; keeps release times far
// from overflow.
inline constexpr uint64_t kMaxDelayNs = 3'600'000'000'000;  // one hour

// Parses the text form into `out`. On error returns false, leaves `out` as it
// was, and sets `error` to a message that names the offending rule, says what
// is wrong and how to write it right.
bool parse_plan(std::string_view text, Plan& out, std::string& error);

// The plan a process starts with: SOFTVERBS_FAULTS, then the rules of the
// file SOFTVERBS_FAULTS_FILE names, with SOFTVERBS_FAULT_SEED (the run's
// seed: softverbs run --seed) in place of the plan's seed. false + a
// message saying which variable is wrong and how.
bool startup_plan(Plan& out, std::string& error);

// A seed as SOFTVERBS_FAULT_SEED and --seed give it: a decimal number below
// 2^64. false + a message otherwise.
bool parse_seed(std::string_view text, uint64_t& seed, std::string& error);

// The text form of `plan`; parse_plan() reads it back to an equal plan.
std::string to_string(const Plan& plan);

// Short names of the text form ("drop", "dup", ...; "tx", "rx", "both").
const char* to_string(Action action);
const char* to_string(Direction direction);

}  // namespace softverbs::fault
