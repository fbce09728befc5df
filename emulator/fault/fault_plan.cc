#include "emulator/fault/fault_plan.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "emulator/fault/opcode_names.h"

namespace softverbs::fault {
namespace {

constexpr uint64_t kNsPerUs = 1'000;
constexpr uint64_t kNsPerMs = 1'000'000;
constexpr uint32_t kMaxQpn = 0xffffff;  // 24 bits in the BTH

struct ActionName {
  Action action;
  const char* name;
};
constexpr ActionName kActionNames[] = {
    {Action::kDrop, "drop"},       {Action::kDuplicate, "dup"},
    {Action::kReorder, "reorder"}, {Action::kDelay, "delay"},
    {Action::kCorrupt, "corrupt"}, {Action::kRnr, "rnr"},
};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Decimal, or hex with a 0x prefix.
bool parse_unsigned(std::string_view text, uint64_t& out) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

bool parse_real(std::string_view text, double& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(out);
}

// "key must be ..., not 'value'": the value quoted as the user wrote it.
std::string bad_value(std::string_view key, std::string_view value, std::string_view rule) {
  return std::string(key) + " must be " + std::string(rule) + ", not '" + std::string(value) + "'";
}

// The keys of one rule as they are read, to catch repeats and keys that
// don't belong to the rule's action.
struct RuleBeingParsed {
  Rule rule{Action::kDrop};
  std::vector<std::string> keys_seen;
  bool has_delay = false, has_jitter = false;
};

std::string parse_duration(std::string_view key, std::string_view value, uint64_t unit_ns,
                           uint64_t& out_ns) {
  double amount = 0;
  const double max_amount = static_cast<double>(kMaxDelayNs) / static_cast<double>(unit_ns);
  if (!parse_real(value, amount) || amount < 0 || amount > max_amount) {
    const std::string unit = unit_ns == kNsPerMs ? "milliseconds" : "microseconds";
    return bad_value(key, value, "a number of " + unit + " from 0 to " +
                                     std::to_string(static_cast<uint64_t>(max_amount)) +
                                     " (e.g. " + std::string(key) + "=2.5)");
  }
  out_ns = static_cast<uint64_t>(std::llround(amount * static_cast<double>(unit_ns)));
  return {};
}

// What is wrong with `key` in a rule of `action`, when it belongs to
// another action only; else "".
std::string key_of_another_action(std::string_view key, Action action) {
  const bool is_delay_key = key == "ms" || key == "us" || key == "jitter_ms" || key == "jitter_us";
  if (is_delay_key && action != Action::kDelay) {
    return "'" + std::string(key) + "' applies only to delay (write e.g. delay:" +
           std::string(key) + "=1)";
  }
  if (key == "depth" && action != Action::kReorder) {
    return "'depth' applies only to reorder (write e.g. reorder:depth=3)";
  }
  return {};
}

// Applies one key=value to the rule; returns what is wrong, or "".
std::string apply_key(std::string_view key, std::string_view value, RuleBeingParsed& parsed) {
  Rule& rule = parsed.rule;
  if (std::string problem = key_of_another_action(key, rule.action); !problem.empty())
    return problem;
  uint64_t number = 0;
  if (key == "dir") {
    const std::string dir = lower(value);
    if (dir == "tx") rule.direction = Direction::kTx;
    else if (dir == "rx") rule.direction = Direction::kRx;
    else if (dir == "both") rule.direction = Direction::kBoth;
    else return bad_value(key, value, "tx, rx or both");
  } else if (key == "qp") {
    if (!parse_unsigned(value, number) || number > kMaxQpn) {
      return bad_value(key, value, "a QP number from 0 to 0xffffff, decimal or 0x hex");
    }
    rule.qpn = static_cast<uint32_t>(number);
  } else if (key == "op") {
    rule.opcode = parse_opcode(value);
    if (!rule.opcode) {
      return "unknown opcode '" + std::string(value) +
             "' (use a name such as SEND_ONLY, RDMA_WRITE_FIRST, ACKNOWLEDGE, READ_REQUEST, "
             "READ_RESPONSE_LAST, UD_SEND_ONLY, or a number from 0 to 255)";
    }
  } else if (key == "p") {
    double p = 0;
    if (!parse_real(value, p) || p < 0 || p > 1) {
      return bad_value(key, value, "a probability from 0 to 1 (e.g. p=0.05)");
    }
    rule.probability = p;
  } else if (key == "nth") {
    if (!parse_unsigned(value, number) || number == 0) {
      return bad_value(key, value, "a whole number from 1 (nth=1: the first matching packet)");
    }
    rule.nth = number;
  } else if (key == "limit") {
    if (!parse_unsigned(value, number) || number == 0) {
      return bad_value(key, value, "a whole number from 1 (leave it out for no limit)");
    }
    rule.limit = number;
  } else if (key == "ms" || key == "us") {
    if (parsed.has_delay) return "give the delay once, with either ms or us";
    parsed.has_delay = true;
    return parse_duration(key, value, key == "ms" ? kNsPerMs : kNsPerUs, rule.delay_ns);
  } else if (key == "jitter_ms" || key == "jitter_us") {
    if (parsed.has_jitter) return "give the jitter once, with either jitter_ms or jitter_us";
    parsed.has_jitter = true;
    return parse_duration(key, value, key == "jitter_ms" ? kNsPerMs : kNsPerUs, rule.jitter_ns);
  } else if (key == "depth") {
    if (!parse_unsigned(value, number) || number == 0 || number > UINT32_MAX) {
      return bad_value(key, value, "a whole number from 1 (how many later frames overtake)");
    }
    rule.reorder_depth = static_cast<uint32_t>(number);
  } else {
    return "unknown key '" + std::string(key) +
           "' (use dir, qp, op, p, nth, limit, ms, us, jitter_ms, jitter_us, depth)";
  }
  return {};
}

// Parses "ACTION[:key=value,...]"; returns what is wrong, or "".
std::string parse_rule(std::string_view text, Rule& out) {
  RuleBeingParsed parsed;
  const size_t colon = text.find(':');
  const std::string action = lower(trim(text.substr(0, colon)));
  const ActionName* found = nullptr;
  for (const ActionName& entry : kActionNames) {
    if (action == entry.name) found = &entry;
  }
  if (action == "duplicate") found = &kActionNames[1];
  if (found == nullptr) {
    if (action.empty())
      return "no action (start the rule with drop, dup, reorder, delay, corrupt or rnr)";
    return "unknown action '" + std::string(trim(text.substr(0, colon))) +
           "' (use drop, dup, reorder, delay, corrupt, rnr)";
  }
  parsed.rule.action = found->action;

  std::string_view items = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  while (!items.empty()) {
    const size_t comma = items.find(',');
    const std::string_view item = trim(items.substr(0, comma));
    items = comma == std::string_view::npos ? "" : items.substr(comma + 1);
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return "'" + std::string(item) + "' is not key=value (write e.g. p=0.1)";
    }
    const std::string key = lower(trim(item.substr(0, equals)));
    const std::string_view value = trim(item.substr(equals + 1));
    for (const std::string& seen : parsed.keys_seen) {
      if (seen == key) return "key '" + key + "' given twice (give each key once)";
    }
    parsed.keys_seen.push_back(key);
    if (value.empty()) return "key '" + key + "' has no value (write " + key + "=VALUE)";
    if (std::string problem = apply_key(key, value, parsed); !problem.empty()) return problem;
  }
  if (parsed.rule.action == Action::kRnr && parsed.rule.direction == Direction::kTx) {
    return "rnr answers SENDs where they arrive (leave dir out, or write dir=rx)";
  }
  if (parsed.rule.action == Action::kDelay && !parsed.has_delay && !parsed.has_jitter) {
    return "delay needs a duration (add ms=N or us=N, e.g. delay:ms=5)";
  }
  out = parsed.rule;
  return {};
}

// True for "seed = N" statements. A rule's first '=' comes after its
// "ACTION:key", so it never reads as "seed".
bool is_seed_statement(std::string_view statement) {
  const size_t equals = statement.find('=');
  return equals != std::string_view::npos && lower(trim(statement.substr(0, equals))) == "seed";
}

// Exact decimal microseconds for a nanosecond count: 1500 -> "1.5".
std::string microseconds_text(uint64_t ns) {
  std::string text = std::to_string(ns / kNsPerUs);
  if (const uint64_t fraction = ns % kNsPerUs; fraction != 0) {
    std::string digits = std::to_string(fraction + kNsPerUs).substr(1);  // three digits
    while (digits.back() == '0') digits.pop_back();
    text += "." + digits;
  }
  return text;
}

// Shortest text that reads back to the same double.
std::string real_text(double value) {
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

std::string hex_text(uint64_t value) {
  char buffer[24];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, 16);
  return "0x" + std::string(buffer, end);
}

std::string rule_text(const Rule& rule) {
  std::string keys;
  auto add = [&keys](std::string_view key, const std::string& value) {
    keys += keys.empty() ? ":" : ",";
    keys += std::string(key) + "=" + value;
  };
  if (rule.direction != Direction::kBoth) add("dir", to_string(rule.direction));
  if (rule.qpn) add("qp", hex_text(*rule.qpn));
  if (rule.opcode) add("op", opcode_text(*rule.opcode));
  if (rule.probability != 1.0) add("p", real_text(rule.probability));
  if (rule.nth != 0) add("nth", std::to_string(rule.nth));
  if (rule.limit != 0) add("limit", std::to_string(rule.limit));
  if (rule.action == Action::kDelay) {
    add("us", microseconds_text(rule.delay_ns));
    if (rule.jitter_ns != 0) add("jitter_us", microseconds_text(rule.jitter_ns));
  }
  if (rule.action == Action::kReorder && rule.reorder_depth != 1) {
    add("depth", std::to_string(rule.reorder_depth));
  }
  return to_string(rule.action) + keys;
}

}  // namespace

const char* to_string(Action action) {
  for (const ActionName& entry : kActionNames) {
    if (entry.action == action) return entry.name;
  }
  return "unknown";
}

const char* to_string(Direction direction) {
  switch (direction) {
    case Direction::kTx: return "tx";
    case Direction::kRx: return "rx";
    case Direction::kBoth: return "both";
  }
  return "both";
}

bool parse_plan(std::string_view text, Plan& out, std::string& error) {
  Plan plan;
  bool seed_seen = false;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? "" : text.substr(newline + 1);
    line = line.substr(0, line.find('#'));  // a comment runs to the end of its line

    while (!line.empty()) {
      const size_t semicolon = line.find(';');
      const std::string_view statement = trim(line.substr(0, semicolon));
      line = semicolon == std::string_view::npos ? "" : line.substr(semicolon + 1);
      if (statement.empty()) continue;

      if (is_seed_statement(statement)) {
        const std::string_view value = trim(statement.substr(statement.find('=') + 1));
        if (seed_seen) {
          error = "fault plan '" + std::string(statement) + "': seed given twice (give it once)";
          return false;
        }
        if (!parse_unsigned(value, plan.seed)) {
          error = "fault plan '" + std::string(statement) +
                  "': seed must be a whole number from 0, decimal or 0x hex (e.g. seed=7)";
          return false;
        }
        seed_seen = true;
        continue;
      }

      Rule rule{Action::kDrop};
      if (std::string problem = parse_rule(statement, rule); !problem.empty()) {
        error = "fault rule '" + std::string(statement) + "': " + problem;
        return false;
      }
      plan.rules.push_back(rule);
    }
  }
  out = std::move(plan);
  return true;
}

std::string to_string(const Plan& plan) {
  std::string text = "seed=" + std::to_string(plan.seed);
  for (const Rule& rule : plan.rules) text += "; " + rule_text(rule);
  return text;
}

}  // namespace softverbs::fault
