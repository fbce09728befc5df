// XRC domains and target QPs (IBTA 11.2.4). The target's data path is in
// responder_xrc.cc; the initiator is an RC requester whose packets carry
// the XRCETH (requester.cc).
#include <cerrno>

#include "emulator/objects/hca_impl.h"
#include "emulator/objects/qp_impl.h"

namespace softverbs {

std::shared_ptr<Xrcd> Hca::open_xrcd(const FileIdentity* file, bool create, bool exclusive,
                                     Errno& err) {
  err = 0;
  if (!file) return std::shared_ptr<Xrcd>(new Xrcd(*this));
  std::lock_guard lock(impl_->objects_mutex);
  std::weak_ptr<Xrcd>& slot = impl_->xrcds_by_file[*file];
  if (std::shared_ptr<Xrcd> existing = slot.lock()) {
    if (exclusive) {
      err = EINVAL;
      return nullptr;
    }
    return existing;
  }
  if (!create) {
    impl_->xrcds_by_file.erase(*file);
    err = EAGAIN;
    return nullptr;
  }
  std::shared_ptr<Xrcd> xrcd(new Xrcd(*this));
  slot = xrcd;
  return xrcd;
}

Xrcd::~Xrcd() {
  Hca::Impl& hca = hca_.impl();
  std::lock_guard lock(hca.objects_mutex);
  std::erase_if(hca.xrcds_by_file, [](const auto& entry) { return entry.second.expired(); });
}

std::unique_ptr<Qp> Hca::create_xrc_target_qp(Xrcd& xrcd, Errno& err) {
  auto impl = std::make_unique<QpImpl>();
  impl->hca = this;
  impl->engine = impl_->engine;
  impl->type = QpType::kXrcRecv;
  impl->xrcd = &xrcd;
  impl->device_index = impl_->description.index;
  impl->attr.port_num = 1;
  if (!add_qp(*impl, err)) return nullptr;
  xrcd.users.fetch_add(1);
  err = 0;
  return std::unique_ptr<Qp>(new Qp(std::move(impl)));
}

}  // namespace softverbs
