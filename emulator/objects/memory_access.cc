// Every access to application memory goes through here: the key names an MR
// of this device, the MR is in the QP's PD, grants the access, and the range
// lies inside it (IBTA 10.6.x, 9.7.4.1.x). Nothing is read or written
// otherwise. Addresses are the MR's own (mr.h) and are translated to the
// host's; the bytes move through app_memory, so memory the application
// unmapped after registering it ends the access as an error, not a signal.
// The MR table stays locked (shared) across the check and the copy, so
// deregistration waits for an access in progress.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "emulator/memory/address_space.h"
#include "emulator/memory/app_memory.h"
#include "emulator/objects/qp_impl.h"

namespace softverbs {
namespace {

// A run's payload is at most 256 packets of 4096 bytes, so a run names at
// most this much of a null MR.
constexpr uint64_t kNullRunBytes = 1u << 20;

// What a run reads where a null MR is the source: a mapping never written,
// so all zeros (the kernel's zero page, no memory of its own).
uint64_t zeros_for_runs() {
  static void* const zeros =
      mmap(nullptr, kNullRunBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return zeros == MAP_FAILED ? 0 : reinterpret_cast<uint64_t>(zeros);
}

// Where a run writes what a null MR drops: never read.
uint64_t sink_for_runs() {
  static void* const sink = mmap(nullptr, kNullRunBytes, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return sink == MAP_FAILED ? 0 : reinterpret_cast<uint64_t>(sink);
}

// A piece of an SGE list: `length` bytes of `mr` at host address `host`,
// `pos` bytes into the message.
struct Piece {
  const Mr* mr;
  uint64_t host;
  uint64_t length;
  uint64_t pos;
  bool null() const { return mr->kind() == MrKind::kNull; }
};

// Walks the SGE list from byte `offset`, calling fn(piece) for each piece
// of `len` bytes; fn returns false when the memory faulted. Returns
// kLocLenErr when the SGEs are too short, kLocProtErr when a key, PD,
// bound or access is wrong or the memory faulted. With the MR table locked.
template <typename Fn>
WcStatus walk_locked(const QpImpl& qp, const Sge* sges, uint32_t count, uint64_t offset,
                     uint64_t len, uint32_t needed_access, Fn&& fn) {
  uint64_t done = 0;
  for (uint32_t i = 0; i < count && done < len; ++i) {
    const Sge& s = sges[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(s.length - offset, len - done);
    const Mr* mr = qp.hca->impl().find_mr_locked(s.lkey);
    if (!mr || &mr->pd() != qp.pd || !mr->contains(s.addr + offset, n) ||
        (mr->access() & needed_access) != needed_access)
      return WcStatus::kLocProtErr;
    if (!fn(Piece{mr, mr->host_address(s.addr + offset), n, done})) return WcStatus::kLocProtErr;
    done += n;
    offset = 0;
  }
  return done == len ? WcStatus::kSuccess : WcStatus::kLocLenErr;
}

// The memory a run's pull reads (outgoing) or fills (incoming) for a piece.
bool run_piece(const Piece& p, bool incoming, RunPiece& out) {
  if (!p.null()) {
    out = RunPiece{p.host, p.length};
    return true;
  }
  const uint64_t stand_in = incoming ? sink_for_runs() : zeros_for_runs();
  out = RunPiece{stand_in, p.length};
  return stand_in != 0 && p.length <= kNullRunBytes;
}

// The pieces of [offset, offset+length) of an SGE list as a run names them:
// memory read from, or (incoming) written into, with local write checked.
// With the MR table locked.
WcStatus run_pieces_locked(const QpImpl& qp, const Sge* sges, uint32_t n, uint64_t offset,
                           uint64_t length, bool incoming, RunPiece* out, uint32_t& count) {
  count = 0;
  return walk_locked(qp, sges, n, offset, length, incoming ? uint32_t{kAccessLocalWrite} : 0u,
                     [&](const Piece& p) { return run_piece(p, incoming, out[count++]); });
}

// After a pull failed with EFAULT, which names neither side: whether it was
// this side's memory (then the access fails here, not the sender's run).
bool writable(std::span<const RunPiece> pieces) {
  return std::all_of(pieces.begin(), pieces.end(), [](const RunPiece& p) {
    return range_is_mapped(p.addr, p.length, true);
  });
}

}  // namespace

WcStatus QpImpl::gather(const Sge* sges, uint32_t n, uint64_t offset,
                        std::span<uint8_t> out) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return walk_locked(*this, sges, n, offset, out.size(), 0, [&](const Piece& p) {
    if (p.null()) {
      std::memset(out.data() + p.pos, 0, p.length);
      return true;
    }
    return app_memory::read(out.data() + p.pos, reinterpret_cast<const void*>(p.host), p.length);
  });
}

WcStatus QpImpl::scatter(const Sge* sges, uint32_t n, uint64_t offset,
                         std::span<const uint8_t> in) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return walk_locked(*this, sges, n, offset, in.size(), kAccessLocalWrite, [&](const Piece& p) {
    return p.null() ||
           app_memory::write(reinterpret_cast<void*>(p.host), in.data() + p.pos, p.length);
  });
}

WcStatus QpImpl::scatter_payload(const Sge* sges, uint32_t n, uint64_t offset, const Payload& in,
                                 int& pull_error) const {
  pull_error = 0;
  if (!in.run) return scatter(sges, n, offset, in.bytes);
  std::shared_lock lock(hca->impl().mr_mutex);
  std::array<RunPiece, kMaxSge> local;
  uint32_t count = 0;
  const WcStatus st =
      run_pieces_locked(*this, sges, n, offset, in.run->bytes, true, local.data(), count);
  if (st != WcStatus::kSuccess) return st;
  const std::span<const RunPiece> pieces(local.data(), count);
  pull_error = pull_run(*in.run, pieces);
  if (pull_error == EFAULT && !writable(pieces)) {
    pull_error = 0;
    return WcStatus::kLocProtErr;
  }
  return WcStatus::kSuccess;
}

WcStatus QpImpl::describe(const Sge* sges, uint32_t n, uint64_t offset, uint64_t length,
                          RunFrame& run) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return run_pieces_locked(*this, sges, n, offset, length, false, run.pieces.data(),
                           run.piece_count);
}

WcStatus QpImpl::describe_destination(const Sge* sges, uint32_t n, uint64_t offset,
                                      uint64_t length, RunFrame& run) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return run_pieces_locked(*this, sges, n, offset, length, true, run.pieces.data(),
                           run.piece_count);
}

bool QpImpl::place_remote(uint32_t rkey, uint64_t va, const Payload& in, int& pull_error) const {
  pull_error = 0;
  return access_remote(rkey, va, in.size(), kAccessRemoteWrite, [&](uint8_t* dst) {
    if (!in.run) return app_memory::write(dst, in.bytes.data(), in.bytes.size());
    if (in.run->placed) return true;  // its sender put the bytes here already
    const RunPiece into{reinterpret_cast<uint64_t>(dst), in.run->bytes};
    pull_error = pull_run(*in.run, std::span(&into, 1));
    if (pull_error == EFAULT && !writable(std::span(&into, 1))) {
      pull_error = 0;
      return false;
    }
    return true;
  });
}

bool QpImpl::transmit_remote(const packet::Headers& h, uint32_t rkey, uint64_t va,
                             uint32_t length) {
  // The payload is copied from the MR straight into the frame; a fault
  // there sends nothing.
  struct FromMr final : PayloadGatherer {
    const uint8_t* source = nullptr;
    WcStatus gather(std::span<uint8_t> into) override {
      return app_memory::read(into.data(), source, into.size()) ? WcStatus::kSuccess
                                                                 : WcStatus::kLocProtErr;
    }
  } from;
  return access_remote(rkey, va, length, kAccessRemoteRead, [&](uint8_t* source) {
    from.source = source;
    const bool link_up = port_up();
    if (engine->transmit_gathered(sent_from_here(destination()), h, length, link_up, from) !=
        WcStatus::kSuccess)
      return false;
    if (link_up)
      ++counters.packets_sent;
    else
      ++counters.port_down_drops;  // a downed link carries nothing
    return true;
  });
}

bool QpImpl::atomic_remote(uint32_t rkey, uint64_t va, bool compare_swap, uint64_t compare_add,
                           uint64_t swap, uint64_t& original) const {
  return access_remote(rkey, va, sizeof(uint64_t), kAccessRemoteAtomic, [&](uint8_t* address) {
    auto* word = reinterpret_cast<uint64_t*>(address);
    return compare_swap ? app_memory::compare_swap(word, compare_add, swap, original)
                        : app_memory::fetch_add(word, compare_add, original);
  });
}

bool QpImpl::atomic_write_remote(uint32_t rkey, uint64_t va, uint64_t data) const {
  return access_remote(rkey, va, sizeof(uint64_t), kAccessRemoteWrite, [&](uint8_t* address) {
    return app_memory::store(reinterpret_cast<uint64_t*>(address), data);
  });
}

bool QpImpl::flush_allowed(uint32_t rkey, uint64_t va, uint64_t len, bool whole_mr,
                           uint32_t access) const {
  if ((attr.access_flags & access) != access) return false;
  const Hca::Impl& h = hca->impl();
  std::shared_lock lock(h.mr_mutex);
  if (whole_mr) {
    // The range is the MR's own: only the key and its rights matter.
    const Mr* mr = h.find_mr_locked(rkey);
    return mr && mr_grants(*mr, access);
  }
  uint64_t host = 0;
  return resolve_remote_locked(rkey, va, len, access, host);
}

bool QpImpl::mr_grants(const Mr& mr, uint32_t access) const {
  return mr.kind() != MrKind::kNull && &mr.pd() == pd && (mr.access() & access) == access;
}

bool QpImpl::resolve_remote_locked(uint32_t rkey, uint64_t va, uint64_t len, uint32_t access,
                                   uint64_t& host) const {
  const Hca::Impl& h = hca->impl();
  if (const Mr* mr = h.find_mr_locked(rkey)) {
    if (!mr_grants(*mr, access) || !mr->contains(va, len)) return false;
    host = mr->host_address(va);
    return true;
  }
  const Mw* mw = h.find_mw_locked(rkey >> 8);
  return mw && mw->resolve_locked(*this, rkey, va, len, access, host);
}

}  // namespace softverbs
