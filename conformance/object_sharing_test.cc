// Sharing a context and its objects between processes (ibv_import_device(3),
// ibv_import_pd(3), ibv_import_mr(3)): a device either shares them, the
// imported object standing for the same one (same handle, same keys), or
// refuses with EOPNOTSUPP, which is what a device that cannot share says;
// never another error, never an object that is not the original.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "conformance/device_fixture.h"

namespace softverbs::conformance {
namespace {

class ObjectSharing : public DeviceTest {};

TEST_F(ObjectSharing, ImportDeviceSharesTheContextOrRefusesWithEopnotsupp) {
  // The man page: cmd_fd must be dup()'d before it is passed.
  const int fd = ::dup(context()->cmd_fd);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  errno = 0;
  ibv_context* imported = ibv_import_device(fd);
  if (!imported) {
    EXPECT_EQ(errno, EOPNOTSUPP) << std::strerror(errno);
    ::close(fd);
    return;
  }
  EXPECT_EQ(imported->device, context()->device);
  EXPECT_EQ(ibv_close_device(imported), 0);
}

TEST_F(ObjectSharing, ImportPdAndMrShareThemOrRefuseWithEopnotsupp) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  std::vector<char> buffer(4096);
  ibv_mr* mr = ibv_reg_mr(pd.get(), buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);

  errno = 0;
  ibv_pd* imported_pd = ibv_import_pd(context(), pd->handle);
  if (!imported_pd) {
    EXPECT_EQ(errno, EOPNOTSUPP) << std::strerror(errno);
    errno = 0;
    EXPECT_EQ(ibv_import_mr(pd.get(), mr->handle), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP) << std::strerror(errno);
    errno = 0;
    EXPECT_EQ(ibv_import_dm(context(), 0), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP) << std::strerror(errno);
  } else {
    EXPECT_EQ(imported_pd->handle, pd->handle);
    ibv_mr* imported_mr = ibv_import_mr(imported_pd, mr->handle);
    ASSERT_NE(imported_mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(imported_mr->lkey, mr->lkey);
    EXPECT_EQ(imported_mr->rkey, mr->rkey);
    ibv_unimport_mr(imported_mr);
    ibv_unimport_pd(imported_pd);
  }
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

}  // namespace
}  // namespace softverbs::conformance
