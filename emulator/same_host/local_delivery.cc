#include "emulator/same_host/local_delivery.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "emulator/engine/engine.h"
#include "emulator/packet/codec.h"
#include "emulator/sync/qp_mutex.h"

namespace softverbs {
namespace {

struct KeptFrame {
  Engine* engine;
  const uint8_t* bytes;
  uint32_t size;
};

// The frames one thread keeps. Their bytes live in chunks that never move
// (a delivery may keep more frames while an earlier one is being read);
// one chunk stays for the next pass, the rest are given back.
class KeptFrames {
 public:
  void add(Engine& engine, std::span<const uint8_t> frame) {
    if (chunks_.empty()) chunks_.push_back(new_chunk());
    if (used_ + frame.size() > kChunkBytes) {
      if (++current_ == chunks_.size()) chunks_.push_back(new_chunk());
      used_ = 0;
    }
    uint8_t* at = chunks_[current_].get() + used_;
    std::memcpy(at, frame.data(), frame.size());
    used_ += frame.size();
    frames_.push_back({&engine, at, static_cast<uint32_t>(frame.size())});
  }

  size_t count() const { return frames_.size(); }
  KeptFrame at(size_t i) const { return frames_[i]; }

  void clear() {
    frames_.clear();
    chunks_.resize(std::min<size_t>(chunks_.size(), 1));
    current_ = 0;
    used_ = 0;
  }

  bool delivering = false;

 private:
  static constexpr size_t kChunkBytes = 64 * 1024;
  static_assert(packet::kMaxFrameBytes <= kChunkBytes);
  static std::unique_ptr<uint8_t[]> new_chunk() {
    return std::make_unique_for_overwrite<uint8_t[]>(kChunkBytes);
  }
  std::vector<KeptFrame> frames_;
  std::vector<std::unique_ptr<uint8_t[]>> chunks_;
  size_t current_ = 0;  // the chunk being filled
  size_t used_ = 0;     // bytes of it in use
};

KeptFrames& kept_frames() {
  thread_local KeptFrames frames;
  return frames;
}

}  // namespace

void LocalDelivery::keep(Engine& engine, std::span<const uint8_t> frame) {
  kept_frames().add(engine, frame);
  has_kept_ = true;
  if (!QpMutex::any_held()) deliver_all();
}

void LocalDelivery::deliver_all() {
  KeptFrames& kept = kept_frames();
  if (kept.delivering) return;
  kept.delivering = true;
  // A delivery may keep more (an ACK, a READ response): they are appended
  // and served in this same loop.
  for (size_t i = 0; i < kept.count(); ++i) {
    const KeptFrame f = kept.at(i);
    f.engine->deliver_kept(std::span<const uint8_t>(f.bytes, f.size));
  }
  kept.clear();
  has_kept_ = false;
  kept.delivering = false;
}

}  // namespace softverbs
