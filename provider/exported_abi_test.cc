// The built libsoftverbs.so against the installed libibverbs: every function
// the real library exports at a public default node is exported with the
// same node, ibv_query_gid_type at the real private node, and nothing else.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>

namespace {

struct DynamicSymbol {
  std::string node;
  bool is_default = false;  // objdump shows non-default versions in parentheses
};

// name -> version of each defined dynamic symbol (not version definitions).
std::multimap<std::string, DynamicSymbol> defined_symbols(const std::string& library) {
  std::multimap<std::string, DynamicSymbol> symbols;
  const std::string command = std::string(SOFTVERBS_OBJDUMP) + " -T '" + library + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return symbols;
  char line[1024];
  while (std::fgets(line, sizeof(line), pipe.get())) {
    std::string text(line);
    if (text.find("*UND*") != std::string::npos || text.find("*ABS*") != std::string::npos)
      continue;
    if (text.find(" DF ") == std::string::npos && text.find(" DO ") == std::string::npos)
      continue;
    std::istringstream fields(text);
    std::string field, previous, last;
    while (fields >> field) {
      previous = last;
      last = field;
    }
    DynamicSymbol symbol;
    symbol.is_default = previous.front() != '(';
    symbol.node = symbol.is_default ? previous : previous.substr(1, previous.size() - 2);
    symbols.emplace(last, symbol);
  }
  return symbols;
}

bool is_public_node(const std::string& node) { return node.rfind("IBVERBS_1.", 0) == 0; }
bool is_private_node(const std::string& node) {
  return node.rfind("IBVERBS_PRIVATE_", 0) == 0;
}

// What libsoftverbs.so must export: name -> node.
std::map<std::string, std::string> expected_exports() {
  std::map<std::string, std::string> expected;
  for (const auto& [name, symbol] : defined_symbols(SOFTVERBS_REAL_IBVERBS)) {
    if (!symbol.is_default) continue;
    if (is_public_node(symbol.node) ||
        (is_private_node(symbol.node) && name == "ibv_query_gid_type"))
      expected[name] = symbol.node;
  }
  return expected;
}

TEST(ExportedAbi, InstalledLibraryHasThePublicSurface) {
  const auto expected = expected_exports();
  EXPECT_GT(expected.size(), 60u);
  EXPECT_EQ(expected.count("ibv_get_device_list"), 1u);
  EXPECT_EQ(expected.count("ibv_query_gid_type"), 1u);
}

TEST(ExportedAbi, EveryPublicDefaultSymbolIsExportedAtTheSameNode) {
  const auto ours = defined_symbols(SOFTVERBS_PROVIDER_LIBRARY);
  ASSERT_FALSE(ours.empty()) << "cannot read " << SOFTVERBS_PROVIDER_LIBRARY;
  for (const auto& [name, node] : expected_exports()) {
    auto range = ours.equal_range(name);
    bool found = false;
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.is_default && it->second.node == node) found = true;
    EXPECT_TRUE(found) << name << "@@" << node << " is not exported";
  }
}

TEST(ExportedAbi, CompatVersionsAreLeftToTheRealLibrary) {
  for (const auto& [name, symbol] : defined_symbols(SOFTVERBS_PROVIDER_LIBRARY))
    EXPECT_TRUE(symbol.is_default) << name << "@" << symbol.node << " is a compat duplicate";
}

TEST(ExportedAbi, OwnControlInterfaceIsExported) {
  const auto ours = defined_symbols(SOFTVERBS_PROVIDER_LIBRARY);
  auto it = ours.find("softverbs_control");
  ASSERT_TRUE(it != ours.end()) << "softverbs_control is not exported";
  EXPECT_EQ(it->second.node, "SOFTVERBS_1.0");
}

// The libc calls the rdma_cm file emulation answers (provider/rdmacm/), at
// the version nodes librdmacm's references name.
const std::map<std::string, std::string>& rdma_cm_file_calls() {
  static const std::map<std::string, std::string> calls = {
      {"open", "GLIBC_2.2.5"},    {"open64", "GLIBC_2.2.5"}, {"write", "GLIBC_2.2.5"},
      {"close", "GLIBC_2.2.5"},   {"openat", "GLIBC_2.4"},   {"openat64", "GLIBC_2.4"},
      {"fstat", "GLIBC_2.33"},    {"fstat64", "GLIBC_2.33"},
      {"__fxstat", "GLIBC_2.2.5"}, {"__fxstat64", "GLIBC_2.2.5"}};
  return calls;
}

TEST(ExportedAbi, TheRdmaCmFileCallsAreExportedAtLibcsNodes) {
  const auto ours = defined_symbols(SOFTVERBS_PROVIDER_LIBRARY);
  for (const auto& [name, node] : rdma_cm_file_calls()) {
    auto range = ours.equal_range(name);
    bool found = false;
    for (auto it = range.first; it != range.second; ++it) found = found || it->second.node == node;
    EXPECT_TRUE(found) << name << "@" << node << " is not exported";
  }
}

TEST(ExportedAbi, NothingElseIsExported) {
  auto expected = expected_exports();
  for (const auto& [name, symbol] : defined_symbols(SOFTVERBS_PROVIDER_LIBRARY)) {
    if (name == "softverbs_control" && symbol.node == "SOFTVERBS_1.0") continue;
    if (auto call = rdma_cm_file_calls().find(name);
        call != rdma_cm_file_calls().end() && call->second == symbol.node)
      continue;
    auto it = expected.find(name);
    EXPECT_TRUE(it != expected.end() && it->second == symbol.node)
        << name << "@" << symbol.node << " is exported but is not libibverbs' public ABI";
  }
}

}  // namespace
