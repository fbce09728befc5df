// The synchronous API of rdma_verbs.h as rdma_server and rdma_client use
// it: rdma_getaddrinfo(3), rdma_create_ep(3) with a QP, rdma_listen,
// rdma_get_request(3), rdma_accept and rdma_connect that return once the
// connection is up, and rdma_post_send/rdma_post_recv with
// rdma_get_send_comp/rdma_get_recv_comp. A refused synchronous connect is
// ECONNREFUSED. Kernel behaviour: docs/rdmacm-kernel-reference.md §6.
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "conformance/cm/cm_events.h"
#include "conformance/cm/cm_sides.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

struct AddrinfoDeleter {
  void operator()(rdma_addrinfo* info) const { rdma_freeaddrinfo(info); }
};
using Addrinfo = std::unique_ptr<rdma_addrinfo, AddrinfoDeleter>;

struct EndpointDeleter {
  void operator()(rdma_cm_id* id) const { rdma_destroy_ep(id); }
};
using Endpoint = std::unique_ptr<rdma_cm_id, EndpointDeleter>;

struct MessageMrDeleter {
  void operator()(ibv_mr* mr) const { rdma_dereg_mr(mr); }
};
using MessageMr = std::unique_ptr<ibv_mr, MessageMrDeleter>;

enum EndpointStep : uint32_t { kListening = 1, kClientDone = 2 };

constexpr size_t kMessageBytes = 16;
const std::vector<uint8_t> kConnectData = bytes_of("hello server");

Addrinfo lookup(const std::string& port, bool passive) {
  rdma_addrinfo hints{};
  hints.ai_flags = passive ? RAI_PASSIVE : 0;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* info = nullptr;
  if (rdma_getaddrinfo(test_address_text().c_str(), port.c_str(), &hints, &info) != 0) {
    ADD_FAILURE() << "rdma_getaddrinfo " << test_address_text() << ":" << port << ": "
                  << strerror(errno);
    return nullptr;
  }
  return Addrinfo(info);
}

// One send and one receive, every send signalled: rdma_server's QP.
ibv_qp_init_attr message_qp_attr() {
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  return attr;
}

Endpoint create_endpoint(rdma_addrinfo* info) {
  ibv_qp_init_attr attr = message_qp_attr();
  rdma_cm_id* id = nullptr;
  if (rdma_create_ep(&id, info, nullptr, &attr) != 0) {
    ADD_FAILURE() << "rdma_create_ep: " << strerror(errno);
    return nullptr;
  }
  return Endpoint(id);
}

// Sends `out`, then takes the message the receive posted before the
// connection got, with the rdma_verbs.h helpers.
void exchange(rdma_cm_id* id, uint8_t* out, ibv_mr* out_mr) {
  ASSERT_EQ(0, rdma_post_send(id, nullptr, out, kMessageBytes, out_mr, 0)) << strerror(errno);
  ibv_wc wc{};
  ASSERT_EQ(1, rdma_get_send_comp(id, &wc)) << strerror(errno);
  EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
  ASSERT_EQ(1, rdma_get_recv_comp(id, &wc)) << strerror(errno);
  EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(kMessageBytes, wc.byte_len);
}

void wait_for_request(rdma_cm_id* listener) {
  pollfd p{listener->channel->fd, POLLIN, 0};
  ASSERT_EQ(1, ::poll(&p, 1, static_cast<int>(kEventTimeout.count())))
      << "no connection request within " << kEventTimeout.count() << " ms";
}

void endpoint_server(PeerLink& link) {
  Addrinfo info = lookup("0", true);
  ASSERT_TRUE(info);
  Endpoint listener = create_endpoint(info.get());
  ASSERT_TRUE(listener);
  ASSERT_EQ(0, rdma_listen(listener.get(), 0)) << strerror(errno);
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(local_port(listener.get())));
  ASSERT_NO_FATAL_FAILURE(wait_for_request(listener.get()));
  rdma_cm_id* raw = nullptr;
  ASSERT_EQ(0, rdma_get_request(listener.get(), &raw)) << strerror(errno);
  Endpoint id(raw);
  ASSERT_NE(nullptr, id->qp) << "rdma_get_request makes the QP the listener's endpoint described";
  ASSERT_NE(nullptr, id->event);
  EXPECT_EQ(RDMA_CM_EVENT_CONNECT_REQUEST, id->event->event);
  const auto* data = static_cast<const uint8_t*>(id->event->param.conn.private_data);
  EXPECT_EQ(0, std::memcmp(kConnectData.data(), data, kConnectData.size()));

  uint8_t in[kMessageBytes] = {}, out[kMessageBytes] = "from the server";
  MessageMr in_mr(rdma_reg_msgs(id.get(), in, sizeof in));
  MessageMr out_mr(rdma_reg_msgs(id.get(), out, sizeof out));
  ASSERT_TRUE(in_mr && out_mr) << strerror(errno);
  ASSERT_EQ(0, rdma_post_recv(id.get(), nullptr, in, sizeof in, in_mr.get())) << strerror(errno);
  ASSERT_EQ(0, rdma_accept(id.get(), nullptr)) << strerror(errno);
  ASSERT_NO_FATAL_FAILURE(exchange(id.get(), out, out_mr.get()));
  EXPECT_STREQ("from the client", reinterpret_cast<char*>(in));
  ASSERT_TRUE(link.wait_for(kClientDone));
  EXPECT_EQ(0, rdma_disconnect(id.get())) << strerror(errno);
}

TEST(CmEndpoint, SynchronousServerAndClientExchangeMessages) {
  run_in_fresh_process([] {
    ForkedPeer server("server", endpoint_server);
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    Addrinfo info = lookup(std::to_string(port), false);
    ASSERT_TRUE(info);
    Endpoint id = create_endpoint(info.get());
    ASSERT_TRUE(id);
    ASSERT_NE(nullptr, id->qp);
    uint8_t in[kMessageBytes] = {}, out[kMessageBytes] = "from the client";
    MessageMr in_mr(rdma_reg_msgs(id.get(), in, sizeof in));
    MessageMr out_mr(rdma_reg_msgs(id.get(), out, sizeof out));
    ASSERT_TRUE(in_mr && out_mr) << strerror(errno);
    ASSERT_EQ(0, rdma_post_recv(id.get(), nullptr, in, sizeof in, in_mr.get())) << strerror(errno);
    rdma_conn_param param{};
    param.private_data = kConnectData.data();
    param.private_data_len = static_cast<uint8_t>(kConnectData.size());
    ASSERT_EQ(0, rdma_connect(id.get(), &param)) << strerror(errno);
    ASSERT_NO_FATAL_FAILURE(exchange(id.get(), out, out_mr.get()));
    EXPECT_STREQ("from the server", reinterpret_cast<char*>(in));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_EQ(0, rdma_disconnect(id.get())) << strerror(errno);
    EXPECT_TRUE(server.join());
  });
}

// librdmacm turns REJECTED into ECONNREFUSED for a synchronous id
// (ucma_complete), as rdma_client shows: "rdma_connect: Connection refused".
TEST(CmEndpoint, SynchronousConnectToNoListenerIsRefused) {
  run_in_fresh_process([] {
    const uint16_t port = unused_port(RDMA_PS_TCP);
    ASSERT_NE(0, port);
    Addrinfo info = lookup(std::to_string(port), false);
    ASSERT_TRUE(info);
    Endpoint id = create_endpoint(info.get());
    ASSERT_TRUE(id);
    EXPECT_EQ(-1, rdma_connect(id.get(), nullptr));
    EXPECT_EQ(ECONNREFUSED, errno) << strerror(errno);
  });
}

bool same_ipv4(const sockaddr* address, uint16_t port) {
  const sockaddr_in expected = test_address(port);
  const auto* in = reinterpret_cast<const sockaddr_in*>(address);
  return address != nullptr && in->sin_family == AF_INET &&
         in->sin_addr.s_addr == expected.sin_addr.s_addr && in->sin_port == expected.sin_port;
}

TEST(CmEndpoint, GetaddrinfoDescribesBothEnds) {
  run_in_fresh_process([] {
    constexpr uint16_t kPort = 7471;
    Addrinfo passive = lookup(std::to_string(kPort), true);
    ASSERT_TRUE(passive);
    EXPECT_EQ(AF_INET, passive->ai_family);
    EXPECT_EQ(IBV_QPT_RC, passive->ai_qp_type);
    EXPECT_EQ(RDMA_PS_TCP, passive->ai_port_space);
    EXPECT_TRUE(passive->ai_flags & RAI_PASSIVE);
    EXPECT_TRUE(same_ipv4(passive->ai_src_addr, kPort))
        << describe_address(passive->ai_src_addr);

    Addrinfo active = lookup(std::to_string(kPort), false);
    ASSERT_TRUE(active);
    EXPECT_EQ(AF_INET, active->ai_family);
    EXPECT_TRUE(same_ipv4(active->ai_dst_addr, kPort)) << describe_address(active->ai_dst_addr);
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
