// The plan a process starts with, from its environment (fault_plan.h).
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "emulator/fault/fault_plan.h"

namespace softverbs::fault {

bool parse_seed(std::string_view text, uint64_t& seed, std::string& error) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    error = "'" + std::string(text) + "' is not a seed: give a decimal number, e.g. 7";
    return false;
  }
  seed = value;
  return true;
}

bool startup_plan(Plan& out, std::string& error) {
  std::string text;
  if (const char* spec = std::getenv("SOFTVERBS_FAULTS"); spec && *spec) text = spec;
  if (const char* file = std::getenv("SOFTVERBS_FAULTS_FILE"); file && *file) {
    std::ifstream in(file);
    if (!in) {
      error = std::string("SOFTVERBS_FAULTS_FILE=") + file + ": cannot read the file";
      return false;
    }
    std::stringstream content;
    content << in.rdbuf();
    text += "\n" + content.str();
  }
  Plan plan;
  if (!parse_plan(text, plan, error)) {
    error = "SOFTVERBS_FAULTS: " + error;
    return false;
  }
  if (const char* seed = std::getenv("SOFTVERBS_FAULT_SEED"); seed && *seed) {
    if (!parse_seed(seed, plan.seed, error)) {
      error = "SOFTVERBS_FAULT_SEED: " + error;
      return false;
    }
  }
  out = plan;
  return true;
}

}  // namespace softverbs::fault
