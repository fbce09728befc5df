// Test support: counts calls of the global operator new, so a test can
// check that a piece of code allocates nothing. Linking
// allocation_counter.cc into a test binary replaces operator new/delete.
#pragma once

#include <cstddef>

namespace softverbs::packet::testing {

// Heap allocations through operator new since the program started.
size_t allocation_count();

}  // namespace softverbs::packet::testing
