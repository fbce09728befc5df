// Every access to application memory goes through here: the key names an MR
// of this device, the MR is in the QP's PD, grants the access, and the range
// lies inside it (IBTA 10.6.x, 9.7.4.1.x). Nothing is read or written
// otherwise. The MR table stays locked (shared) across the check and the
// copy, so deregistration waits for an access in progress.
#include <algorithm>
#include <array>
#include <cstring>

#include "emulator/qp_impl.h"

namespace softverbs {
namespace {

bool inside(const Mr& mr, uint64_t va, uint64_t len) {
  return va >= mr.addr() && len <= mr.length() && va - mr.addr() <= mr.length() - len;
}

// Walks the SGE list from byte `offset`, calling fn(sge_addr, n, data_pos)
// for each piece of `len` bytes. Returns kLocLenErr when the SGEs are too
// short. With the MR table locked.
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
    if (!mr || &mr->pd() != qp.pd || !inside(*mr, s.addr + offset, n) ||
        (mr->access() & needed_access) != needed_access)
      return WcStatus::kLocProtErr;
    fn(s.addr + offset, n, done);
    done += n;
    offset = 0;
  }
  return done == len ? WcStatus::kSuccess : WcStatus::kLocLenErr;
}

}  // namespace

WcStatus QpImpl::gather(const Sge* sges, uint32_t n, uint64_t offset,
                        std::span<uint8_t> out) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return walk_locked(*this, sges, n, offset, out.size(), 0,
                     [&](uint64_t addr, uint64_t len, uint64_t pos) {
                       std::memcpy(out.data() + pos, reinterpret_cast<const void*>(addr), len);
                     });
}

WcStatus QpImpl::scatter(const Sge* sges, uint32_t n, uint64_t offset,
                         std::span<const uint8_t> in) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  return walk_locked(*this, sges, n, offset, in.size(), kAccessLocalWrite,
                     [&](uint64_t addr, uint64_t len, uint64_t pos) {
                       std::memcpy(reinterpret_cast<void*>(addr), in.data() + pos, len);
                     });
}

WcStatus QpImpl::scatter_payload(const Sge* sges, uint32_t n, uint64_t offset, const Payload& in,
                                 int& pull_error) const {
  pull_error = 0;
  if (!in.run) return scatter(sges, n, offset, in.bytes);
  std::shared_lock lock(hca->impl().mr_mutex);
  std::array<RunPiece, kMaxSge> local;
  size_t count = 0;
  const WcStatus st = walk_locked(*this, sges, n, offset, in.run->bytes, kAccessLocalWrite,
                                  [&](uint64_t addr, uint64_t len, uint64_t) {
                                    local[count++] = RunPiece{addr, len};
                                  });
  if (st != WcStatus::kSuccess) return st;
  pull_error = pull_run(*in.run, std::span(local.data(), count));
  return WcStatus::kSuccess;
}

WcStatus QpImpl::describe(const Sge* sges, uint32_t n, uint64_t offset, uint64_t length,
                          RunFrame& run) const {
  std::shared_lock lock(hca->impl().mr_mutex);
  run.piece_count = 0;
  return walk_locked(*this, sges, n, offset, length, 0, [&](uint64_t addr, uint64_t len, uint64_t) {
    run.pieces[run.piece_count++] = RunPiece{addr, len};
  });
}

bool QpImpl::place_remote(uint32_t rkey, uint64_t va, const Payload& in, int& pull_error) const {
  pull_error = 0;
  return access_remote(rkey, va, in.size(), kAccessRemoteWrite, [&](uint8_t* dst) {
    if (!in.run) {
      std::memcpy(dst, in.bytes.data(), in.bytes.size());
      return;
    }
    const RunPiece into{reinterpret_cast<uint64_t>(dst), in.run->bytes};
    pull_error = pull_run(*in.run, std::span(&into, 1));
  });
}

bool QpImpl::remote_access_ok_locked(uint32_t rkey, uint64_t va, uint64_t len,
                                     uint32_t access) const {
  const Mr* mr = hca->impl().find_mr_locked(rkey);
  return mr && &mr->pd() == pd && (mr->access() & access) == access && inside(*mr, va, len);
}

}  // namespace softverbs
