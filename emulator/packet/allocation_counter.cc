// Replacement global operator new/delete that count allocations. Kept in a
// file of its own so the compiler never inlines them into callers (which
// would also draw mismatched-new-delete warnings about the malloc/free
// underneath).
#include "emulator/packet/allocation_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<size_t> g_allocations{0};
}  // namespace

namespace softverbs::packet::testing {
size_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }
}  // namespace softverbs::packet::testing

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
