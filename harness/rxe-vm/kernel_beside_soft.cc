// kernel_beside_soft: one process, under `softverbs run`, holding two
// librdmacm connections at once: one to a loopback address, which the soft
// devices serve, and one to the address of a kernel RDMA device (an HCA,
// rxe), which the kernel's CM and that device serve. One listener on the
// any address takes both, as a kernel listener hears every device. Each
// connection carries a message there and back, and says which device it
// ran on. Exit 0 when both ran on the device they should have, 1 when not,
// 77 (skipped) on a host without a kernel RDMA device. Bounded by a 60 s
// alarm.
//
//   softverbs run -- kernel_beside_soft
//   harness/rxe-vm/kernel-cm.sh       (in the rxe guest, with the rest)
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>

namespace {

constexpr int kSkipped = 77;
constexpr size_t kMessageBytes = 64;

std::set<std::string> entries_of(const std::string& directory) {
  std::set<std::string> names;
  if (DIR* dir = opendir(directory.c_str())) {
    while (dirent* e = readdir(dir))
      if (e->d_name[0] != '.') names.insert(e->d_name);
    closedir(dir);
  }
  return names;
}

// The first IPv4 address of a net device a kernel RDMA device sits on.
std::string kernel_device_address() {
  std::set<std::string> netdevs;
  const std::string ib = "/sys/class/infiniband/";
  for (const std::string& device : entries_of(ib))
    for (const std::string& port : entries_of(ib + device + "/ports")) {
      const std::string ndevs = ib + device + "/ports/" + port + "/gid_attrs/ndevs/";
      for (const std::string& index : entries_of(ndevs)) {
        std::ifstream file(ndevs + index);
        std::string name;
        if (file >> name) netdevs.insert(name);
      }
    }
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return {};
  std::string found;
  for (ifaddrs* i = interfaces; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !netdevs.count(i->ifa_name)) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  freeifaddrs(interfaces);
  return found;
}

ibv_qp_init_attr message_qp() {
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  return attr;
}

bool fail(const char* what) {
  std::fprintf(stderr, "kernel_beside_soft: %s: %s\n", what, std::strerror(errno));
  return false;
}

// The passive side of one connection: takes the request, echoes one message.
bool serve_one(rdma_cm_id* listener, std::string& device) {
  rdma_cm_id* id = nullptr;
  if (rdma_get_request(listener, &id) != 0) return fail("rdma_get_request");
  device = ibv_get_device_name(id->verbs->device);
  char buffer[kMessageBytes] = {};
  ibv_mr* mr = rdma_reg_msgs(id, buffer, sizeof buffer);
  ibv_wc wc;
  const bool ok = mr && rdma_post_recv(id, nullptr, buffer, sizeof buffer, mr) == 0 &&
                  rdma_accept(id, nullptr) == 0 && rdma_get_recv_comp(id, &wc) == 1 &&
                  wc.status == IBV_WC_SUCCESS &&
                  rdma_post_send(id, nullptr, buffer, sizeof buffer, mr, 0) == 0 &&
                  rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
  if (!ok) fail("serving a connection");
  rdma_disconnect(id);
  if (mr) rdma_dereg_mr(mr);
  rdma_destroy_ep(id);
  return ok;
}

// The active side: connects to `address`, sends a message and checks the echo.
bool connect_to(const std::string& address, uint16_t port, std::string& device) {
  rdma_addrinfo hints{}, *info = nullptr;
  hints.ai_port_space = RDMA_PS_TCP;
  if (rdma_getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &info) != 0)
    return fail("rdma_getaddrinfo");
  ibv_qp_init_attr attr = message_qp();
  rdma_cm_id* id = nullptr;
  const int created = rdma_create_ep(&id, info, nullptr, &attr);
  rdma_freeaddrinfo(info);
  if (created != 0) return fail("rdma_create_ep");
  device = ibv_get_device_name(id->verbs->device);
  char out[kMessageBytes] = {}, in[kMessageBytes] = {};
  std::snprintf(out, sizeof out, "to %s", address.c_str());
  ibv_mr* out_mr = rdma_reg_msgs(id, out, sizeof out);
  ibv_mr* in_mr = rdma_reg_msgs(id, in, sizeof in);
  ibv_wc wc;
  bool ok = out_mr && in_mr && rdma_post_recv(id, nullptr, in, sizeof in, in_mr) == 0 &&
            rdma_connect(id, nullptr) == 0 &&
            rdma_post_send(id, nullptr, out, sizeof out, out_mr, 0) == 0 &&
            rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
            rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
  if (!ok) fail(("connecting to " + address).c_str());
  if (ok && std::strcmp(in, out) != 0) {
    std::fprintf(stderr, "kernel_beside_soft: %s echoed \"%s\", not \"%s\"\n", address.c_str(),
                 in, out);
    ok = false;
  }
  rdma_disconnect(id);
  if (out_mr) rdma_dereg_mr(out_mr);
  if (in_mr) rdma_dereg_mr(in_mr);
  rdma_destroy_ep(id);
  return ok;
}

}  // namespace

int main() {
  alarm(60);
  struct stat st;
  const std::string kernel_address = kernel_device_address();
  if (stat("/dev/infiniband/rdma_cm", &st) != 0 || kernel_address.empty()) {
    std::printf("kernel_beside_soft: no kernel RDMA device with an IPv4 address: skipped\n");
    return kSkipped;
  }
  rdma_addrinfo hints{}, *info = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  if (rdma_getaddrinfo("0.0.0.0", "0", &hints, &info) != 0) return fail("passive addrinfo"), 1;
  ibv_qp_init_attr attr = message_qp();
  rdma_cm_id* listener = nullptr;
  const int created = rdma_create_ep(&listener, info, nullptr, &attr);
  rdma_freeaddrinfo(info);
  if (created != 0 || rdma_listen(listener, 2) != 0) return fail("listening"), 1;
  const uint16_t port = ntohs(rdma_get_src_port(listener));

  const std::string addresses[2] = {"127.0.0.1", kernel_address};
  std::string served_on[2], connected_on[2];
  bool served[2] = {}, connected[2] = {};
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) served[i] = serve_one(listener, served_on[i]);
  });
  for (int i = 0; i < 2; ++i) connected[i] = connect_to(addresses[i], port, connected_on[i]);
  server.join();
  rdma_destroy_ep(listener);

  bool ok = true;
  for (int i = 0; i < 2; ++i) {
    std::printf("%-16s client on %-12s server on %-12s %s\n", addresses[i].c_str(),
                connected_on[i].c_str(), served_on[i].c_str(),
                connected[i] && served[i] ? "message echoed" : "FAILED");
    ok = ok && connected[i] && served[i];
  }
  const bool soft_is_soft = connected_on[0].rfind("softverbs", 0) == 0;
  const bool kernel_is_kernel =
      !connected_on[1].empty() && connected_on[1].rfind("softverbs", 0) != 0 &&
      entries_of("/sys/class/infiniband").count(connected_on[1]) != 0;
  if (!soft_is_soft) std::printf("loopback should have run on a soft device\n");
  if (!kernel_is_kernel) std::printf("%s should have run on its kernel device\n", addresses[1].c_str());
  return ok && soft_is_soft && kernel_is_kernel ? 0 : 1;
}
