// Tells the CPU this is a spin-wait (lets the sibling hyperthread run and
// saves power while a word in shared memory is looked at again and again).
#pragma once

namespace softverbs {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace softverbs
